//! The few types both Devin's side (`fleet`, `orchestrator`) and the sandbox
//! backends use, so that a backend never depends on the Devin client:
//! [`Secret`] (a credential that never prints), [`NetworkPolicy`] (what a
//! session may reach), [`Backoff`] (jittered retry delays) and the
//! [`settings`] vocabulary every owner of a setting validates it with, and
//! [`open_enum!`], the one way a server's string enum is read.

mod backoff;
mod network_policy;
pub mod open_enum;
mod secret;
pub mod settings;
mod time;

pub use backoff::Backoff;
pub use network_policy::{AllowRule, NetworkPolicy};
pub use secret::Secret;
pub use time::now_ms;
