//! Answers about an outpost's queue that retrying cannot fix: the fleet
//! API refused the token (401), refused it this queue (403), or does not
//! know the outpost (404). At start they end `serve` (see
//! `serve/start_check.rs`); later they make the outpost not ready and are
//! logged at error level once a minute, while running sessions go on.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use fleet::FleetError;
use tracing::{debug, error, info};

/// How often a refusal that persists is logged again.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// The scope reading the queue needs.
const MACHINE_SCOPE: &str = "account.outposts.machine";

/// What to tell an operator when the API answered `err` to the queue of
/// `outpost`: `None` when the answer is not a refusal (a transport error,
/// a 5xx: retrying may fix those). Names the outpost, the API URL and the
/// remedy.
pub(crate) fn advice(outpost: &str, api_url: &str, err: &FleetError) -> Option<String> {
    let doctor = "`garrison doctor` checks the token and the outposts";
    match err {
        FleetError::Unauthorized { .. } => Some(format!(
            "the fleet API at {api_url} refused the token (401) when listing the queue of \
             outpost {outpost}: the token is wrong, expired or revoked, or belongs to another \
             API; get a new one with `garrison connect` or set DEVIN_OUTPOSTS_TOKEN, and check \
             --api-url (DEVIN_API_URL); {doctor}"
        )),
        FleetError::Forbidden { .. } => Some(format!(
            "the fleet API at {api_url} refused to list the queue of outpost {outpost} (403): \
             the token lacks the {MACHINE_SCOPE} scope, or the outpost belongs to another \
             account; use a service-user token with that scope (`garrison connect` asks for \
             it); {doctor}"
        )),
        FleetError::NotFound { .. } => Some(format!(
            "outpost {outpost} does not exist at the fleet API {api_url} (404 when listing its \
             queue): check --outpost (OUTPOST_ID, or the [[outpost]] tables of the config file) \
             against `garrison outposts list`, or create it with `garrison outposts create \
             NAME`; check --api-url (DEVIN_API_URL) too"
        )),
        _ => None,
    }
}

/// One outpost's standing refusal, if the last answer about its queue was
/// one. Shared by the queue task (which sets and clears it) and readiness
/// (which reads it).
#[derive(Default)]
pub struct Refusal {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The advice of the last refusal, while it stands.
    current: Option<String>,
    /// When a refusal was last logged.
    logged_at: Option<Instant>,
}

/// Whether a refusal that still stands is logged now: the first one at
/// once, then once per `every`.
pub(crate) fn log_due(logged_at: Option<Instant>, now: Instant, every: Duration) -> bool {
    logged_at.is_none_or(|at| now.saturating_duration_since(at) >= every)
}

impl Refusal {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `err` if it is a refusal, logging it at error level when
    /// [`log_due`]; whether it was one (else the caller logs it its way).
    pub fn note(&self, outpost: &str, api_url: &str, err: &FleetError) -> bool {
        let Some(advice) = advice(outpost, api_url, err) else {
            return false;
        };
        let now = Instant::now();
        let log = {
            let mut state = self.lock();
            let due = log_due(state.logged_at, now, LOG_EVERY);
            if due {
                state.logged_at = Some(now);
            }
            state.current = Some(advice.clone());
            due
        };
        if log {
            error!(
                outpost,
                error = %err,
                "{advice}; not ready until it is fixed (sessions already running go on; this is logged again once a minute while it lasts)"
            );
        } else {
            debug!(outpost, error = %err, "the fleet API still refuses this queue");
        }
        true
    }

    /// The API answered the queue normally: the refusal, if any, is over.
    pub fn clear(&self, outpost: &str) {
        let was = {
            let mut state = self.lock();
            state.logged_at = None;
            state.current.take()
        };
        if was.is_some() {
            info!(outpost, "the fleet API answers this outpost's queue again");
        }
    }

    /// The advice of the standing refusal.
    pub fn current(&self) -> Option<String> {
        self.lock().current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standing_refusal_is_logged_at_once_then_once_per_interval() {
        let t0 = Instant::now();
        let minute = Duration::from_secs(60);
        assert!(log_due(None, t0, minute));
        assert!(!log_due(Some(t0), t0 + Duration::from_secs(2), minute));
        assert!(!log_due(Some(t0), t0 + Duration::from_secs(59), minute));
        assert!(log_due(Some(t0), t0 + minute, minute));
    }

    #[test]
    fn refusals_name_the_outpost_the_api_and_the_remedy() {
        let url = "http://127.0.0.1:9";
        let e = |err| advice("outpost_x", url, &err).expect("a refusal");
        for text in [
            e(FleetError::Unauthorized {
                route: "GET /devins",
            }),
            e(FleetError::Forbidden {
                route: "GET /devins",
                scope_hint: MACHINE_SCOPE,
                body: String::new(),
            }),
            e(FleetError::NotFound {
                route: "GET /devins",
            }),
        ] {
            assert!(text.contains("outpost_x") && text.contains(url), "{text}");
            assert!(text.contains("garrison "), "no remedy: {text}");
        }
        assert!(e(FleetError::Unauthorized { route: "r" }).contains("401"));
        assert!(e(FleetError::NotFound { route: "r" }).contains("does not exist"));
        let transient = FleetError::Status {
            route: "GET /devins",
            code: 503,
            body: String::new(),
            retry_after: None,
        };
        assert_eq!(advice("o", url, &transient), None);
    }

    #[test]
    fn a_refusal_stands_until_the_queue_answers_again() {
        let refusal = Refusal::default();
        let unauthorized = FleetError::Unauthorized {
            route: "GET /devins",
        };
        assert!(refusal.note("o", "http://api", &unauthorized));
        assert!(refusal.current().unwrap().contains("401"));
        let transient = FleetError::Status {
            route: "GET /devins",
            code: 502,
            body: String::new(),
            retry_after: None,
        };
        assert!(!refusal.note("o", "http://api", &transient));
        assert!(refusal.current().is_some(), "a 5xx says nothing new");
        refusal.clear("o");
        assert_eq!(refusal.current(), None);
    }
}
