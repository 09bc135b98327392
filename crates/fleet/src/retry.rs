//! How the fleet client retries idempotent calls.

use std::time::Duration;

pub use common::Backoff;

/// How idempotent GETs are retried on transport errors, timeouts, 5xx and 429.
/// POSTs and DELETEs are never retried by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first; 1 disables retries.
    pub attempts: u32,
    pub backoff: Backoff,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(5)),
        }
    }
}

impl RetryPolicy {
    /// No retries: each GET is tried once.
    pub const fn none() -> Self {
        Self {
            attempts: 1,
            backoff: Backoff::new(Duration::ZERO, Duration::ZERO),
        }
    }
}
