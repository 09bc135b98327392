//! Garrison's control loop.
//!
//! Data flows one way: the queue view observes the fleet API, the planner
//! decides, the executor (the session runner, [`serve`]) performs through a
//! [`sandbox::Sandbox`], and the [`Store`] records every step before and
//! after it happens.
//!
//! The public API:
//!
//! - Serving: [`serve()`] runs the daemon from a [`settings::ServeConfig`]
//!   ([`Serving`] is a running one, [`OperatorStops`] what the operator
//!   asked to stop); [`prepare`] then [`run_prepared`] do the same in two
//!   steps for a caller that needs the [`Serving`] first (the demo, the
//!   bench). It refuses with [`Misconfigured`] or [`PlatformRefused`];
//!   [`db_path`] is where its store lives.
//! - [`settings`]: every setting, its sources and how they resolve.
//! - [`api`]: the admin JSON API's routes and types, with the admin token
//!   ([`ADMIN_TOKEN_ENV`], [`ADMIN_TOKEN_FILE`]) and the page bound
//!   [`MAX_LIMIT`].
//! - The record: [`Store`], [`SessionRecord`], [`Event`], [`SnapshotReason`],
//!   [`Unrestorable`], [`stage_label`], and the session's output log
//!   [`REMOTE_LOG`].
//! - The planner's vocabulary: [`Stage`], [`StageLabel`], [`Finish`],
//!   [`Millis`], [`Policy`] and [`renew_margin`].
//! - Odds and ends other crates share: [`RemoteResolver`] (which remote
//!   binary a session runs), [`GIT_TOKEN_ENV`], [`LOG_EVERY`] (how often a
//!   persisting queue refusal is logged), [`Metrics`] and [`Redactor`].

mod admin;
pub mod api;
mod contract;
mod metrics;
mod planner;
mod queue;
mod redact;
mod remote;
mod repos;
mod room;
mod serve;
mod serving;
mod session;
mod session_log;
pub mod settings;
mod store;

pub use admin::listing::MAX_LIMIT;
pub use admin::token::{ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE};
pub use metrics::{Histogram, HistogramSnapshot, Metrics};
pub use planner::{Finish, Millis, Policy, Stage, StageLabel, renew_margin};
pub use queue::refusal::LOG_EVERY;
pub use redact::Redactor;
pub use remote::RemoteResolver;
pub use repos::GIT_TOKEN_ENV;
pub use serve::{Misconfigured, PlatformRefused, Serving, db_path, prepare, run_prepared, serve};
pub use session::OperatorStops;
pub use session_log::REMOTE_LOG;
pub use store::{Event, SessionRecord, SnapshotReason, Store, Unrestorable, stage_label};
