//! The typed fleet client. Its options, construction and the shared state
//! every call goes through are in `client/base.rs`; the queue calls live
//! in `client/queue.rs`, the request machinery (timeouts, capped bodies, GET retries, counters) that
//! [`crate::watch`] and the outposts calls build on in `client/request.rs`,
//! and the lenient reading of queue entries and list pages in
//! `client/page.rs`.

mod base;
mod page;
mod queue;
mod request;

pub use base::{ClientOptions, FleetClient};
pub(crate) use base::{SCOPE_MACHINE, SCOPE_ORCHESTRATOR};
pub(crate) use page::{RawPage, cursor_string, parse_entry};
pub use queue::{ListQuery, ReleaseOutcome};
pub(crate) use request::{Call, Raw};
