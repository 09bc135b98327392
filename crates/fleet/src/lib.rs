//! Client for the Devin Outposts fleet API (`/opbeta/outposts`).
//!
//! [`wire`] holds the tolerant JSON types, [`client::FleetClient`] the typed
//! calls (list, watch, get, claim, release, outposts), [`pkce`] the partner
//! connection exchange. The crate knows nothing about sandboxes.

pub mod secret;
pub mod wire;

pub use secret::Secret;
pub use wire::*;
