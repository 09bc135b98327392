//! Garrison's control loop.
//!
//! Data flows one way: the [`queue`] view observes the fleet API, the
//! [`planner`] decides, the executor (`session`, [`serve`]) performs
//! through a [`sandbox::Sandbox`], and the [`store`] records every step
//! before and after it happens.

pub mod admin;
pub mod api;
mod contract;
mod metrics;
pub mod planner;
pub mod queue;
mod redact;
pub mod remote;
pub mod repos;
pub mod serve;
mod serving;
mod session;
pub mod session_log;
pub mod settings;
pub mod store;

pub use metrics::{Histogram, HistogramSnapshot, Metrics};
pub use redact::Redactor;
pub use session::OperatorStops;
