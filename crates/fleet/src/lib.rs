//! Client for the Devin Outposts fleet API (`/opbeta/outposts`).
//!
//! `wire.rs` holds the tolerant JSON types ([`QueueEntry`], [`SessionId`], ...), [`FleetClient`] the typed calls
//! (list, watch, get, claim, release, outposts), [`pkce`] the partner
//! connection exchange. The crate knows nothing about sandboxes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fleet::FleetError> {
//! use fleet::{ClientOptions, FleetClient, Phase, Secret, WatchItem};
//! use futures::StreamExt;
//!
//! let client = FleetClient::new("https://api.devin.ai", Secret::new("cog_..."), ClientOptions::default())?;
//! // List first, then watch from the list's final cursor.
//! let (entries, cursor) = client.list_all("outpost_env-1", Some(Phase::Pending), None).await?;
//! let mut watch = client.watch_forever("outpost_env-1", cursor);
//! while let Some(item) = watch.next().await {
//!     if let WatchItem::Event(event) = item {
//!         println!("{} {}", event.event_type, event.object.session_id());
//!     }
//! }
//! # let _ = entries; Ok(()) }
//! ```

mod cause;
mod client;
mod error;
mod http;
mod outposts;
pub mod pkce;
mod retry;
mod session_id;
mod sse;
pub mod stats;
mod timestamp;
mod watch;
mod wire;

#[cfg(test)]
mod tests;

pub use client::{ClientOptions, FleetClient, ListQuery, ReleaseOutcome};
pub use common::Secret;
pub use error::{ClaimError, FleetError};
pub use pkce::{ConnectError, Pkce};
pub use retry::{Backoff, RetryPolicy};
pub use stats::{RequestStats, RouteStats};
pub use watch::{WatchForever, WatchItem, WatchStream};
pub use wire::*;
