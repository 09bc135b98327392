//! When to try a failed request again, and how long to wait. Pure: the
//! client supplies the randomness and sleeps.
//!
//! Follows Tensorlake's SDK policy (`src/retry.rs` of the `tensorlake`
//! crate, `RETRYABLE_STATUS_CODES` in `src/tensorlake/sandbox/_defaults.py`):
//! - 502, 503 and 504 may come after the server acted, so they are retried
//!   only for requests that can safely run twice;
//! - 429 means the request was refused before it ran: always retried;
//! - a proxy answering a 5xx with one of [`UNDELIVERED_CODES`] (it gave up
//!   before forwarding the request) and a failed connect never reached the
//!   sandbox: retried even for creating a sandbox or starting a process. A
//!   4xx with such a code is a definitive answer the proxy passed on, and
//!   is not retried (`SANDBOX_PROXY_UNDELIVERED_CODES` and
//!   `never_reached_server` in `src/error.rs` of the `tensorlake` crate).

use std::time::Duration;

use common::Backoff;

/// Error codes with which Tensorlake's sandbox proxy says, on a 5xx, that
/// the request was not forwarded: its lookup did not answer, the sandbox
/// has no route yet, the dataplane could not be reached, the auth check
/// failed.
pub(crate) const UNDELIVERED_CODES: &[&str] = &[
    "SANDBOX_UPSTREAM_ERROR",
    "SANDBOX_NOT_READY",
    "SANDBOX_UNREACHABLE",
    "AUTH_SERVICE_UNAVAILABLE",
];

/// How many times and how patiently to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The longest wait before the first retry (doubled for each next one,
    /// up to `cap`; the wait itself is drawn below it).
    pub base: Duration,
    /// The longest wait between two attempts.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 6,
            base: Duration::from_millis(150),
            cap: Duration::from_secs(10),
        }
    }
}

/// Whether a request is safe to send twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// Sending it twice does what sending it once does.
    Idempotent,
    /// Retried only where the service surely did not act on it.
    NotIdempotent,
}

/// Whether an HTTP answer `status` with error `code` is worth retrying.
pub(crate) fn retryable_status(status: u16, code: Option<&str>, idem: Idempotency) -> bool {
    if (500..600).contains(&status) && code.is_some_and(|c| UNDELIVERED_CODES.contains(&c)) {
        return true;
    }
    match status {
        429 => true,
        502..=504 => idem == Idempotency::Idempotent,
        _ => false,
    }
}

/// Whether a transport failure is worth retrying: a connect failure never
/// reached the server; anything else may have.
pub(crate) fn retryable_transport(connect_failed: bool, idem: Idempotency) -> bool {
    connect_failed || idem == Idempotency::Idempotent
}

/// Wait before retry number `retry` (1-based): the shared full-
/// jitter backoff for the draw `jitter` in `[0, 1]`, so that clients that
/// failed together do not retry together. A `Retry-After` hint is
/// honoured up to the cap.
pub(crate) fn backoff(
    policy: &RetryPolicy,
    retry: u32,
    jitter: f64,
    retry_after: Option<Duration>,
) -> Duration {
    let jittered = Backoff::new(policy.base, policy.cap).delay_at(retry.saturating_sub(1), jitter);
    match retry_after {
        Some(hint) => hint.min(policy.cap).max(jittered),
        None => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Idempotency::*;

    #[test]
    fn statuses() {
        assert!(retryable_status(429, None, NotIdempotent));
        assert!(retryable_status(503, None, Idempotent));
        assert!(!retryable_status(503, None, NotIdempotent));
        assert!(retryable_status(
            503,
            Some("SANDBOX_UPSTREAM_ERROR"),
            NotIdempotent
        ));
        assert!(!retryable_status(500, None, Idempotent));
        assert!(!retryable_status(404, None, Idempotent));
        assert!(!retryable_status(409, None, Idempotent));
    }

    #[test]
    fn exactly_the_proxys_undelivered_codes_on_a_5xx_are_retried_for_anything() {
        for code in [
            "SANDBOX_UPSTREAM_ERROR",
            "SANDBOX_NOT_READY",
            "SANDBOX_UNREACHABLE",
            "AUTH_SERVICE_UNAVAILABLE",
        ] {
            for status in [500, 502, 503, 504] {
                assert!(
                    retryable_status(status, Some(code), NotIdempotent),
                    "{status} {code}"
                );
            }
            // A 4xx with the code is the proxy passing on a real answer.
            for status in [400, 403, 404, 409] {
                assert!(
                    !retryable_status(status, Some(code), NotIdempotent),
                    "{status} {code}"
                );
                assert!(
                    !retryable_status(status, Some(code), Idempotent),
                    "{status} {code}"
                );
            }
        }
        for other in ["SANDBOX_NOT_FOUND", "SANDBOX_NOT_RUNNING", "INTERNAL"] {
            assert!(
                !retryable_status(503, Some(other), NotIdempotent),
                "{other}"
            );
        }
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let p = RetryPolicy::default();
        assert_eq!(backoff(&p, 1, 1.0, None), Duration::from_millis(150));
        assert_eq!(backoff(&p, 1, 0.5, None), Duration::from_millis(75));
        assert_eq!(backoff(&p, 3, 1.0, None), Duration::from_millis(600));
        assert_eq!(backoff(&p, 30, 1.0, None), p.cap);
        assert_eq!(
            backoff(&p, 1, 0.0, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(backoff(&p, 1, 0.0, Some(Duration::from_secs(600))), p.cap);
    }
}
