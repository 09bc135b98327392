//! How the fleet client retries idempotent calls, and how long a server's
//! `Retry-After` asks it to wait.

use std::time::{Duration, SystemTime};

pub use common::Backoff;

/// How idempotent GETs are retried on transport errors, timeouts, 5xx and 429.
/// POSTs and DELETEs are never retried by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first; 1 disables retries.
    pub attempts: u32,
    /// The delays between attempts.
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

/// The longest a `Retry-After` is waited out within one call: a server that
/// asks for more gets the call back after this long (its caller's own
/// backoff then spaces further tries).
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// A `Retry-After` value (RFC 9110 §10.2.3): delay-seconds or an HTTP-date,
/// the date read against `now`; capped at [`MAX_RETRY_AFTER`]. A date in the
/// past is no wait; anything unreadable is `None`.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        // IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") is RFC 2822 syntax.
        let at: SystemTime = chrono::DateTime::parse_from_rfc2822(value).ok()?.into();
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates_and_is_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37 UTC
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past"
        );
        assert_eq!(parse_retry_after("86400", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
