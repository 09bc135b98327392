//! Request counters by route template, for the orchestrator's metrics.
//!
//! Counting lives behind one mutex: the fleet API is called a few times a
//! second at most, so contention is irrelevant and a plain map keeps the
//! snapshot type trivial to export.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Route templates, used in errors, logs and [`RequestStats`]. Templates, not
/// URLs, so label cardinality stays fixed whatever the session ids are.
pub mod route {
    /// Listing the queue.
    pub const LIST: &str = "GET /devins";
    /// Watching the queue.
    pub const WATCH: &str = "GET /devins?watch=true";
    /// Reading one entry.
    pub const GET: &str = "GET /devins/{session_id}";
    /// Claiming (or renewing) a session.
    pub const CLAIM: &str = "POST /devins/{session_id}/claim";
    /// Releasing a claim.
    pub const RELEASE: &str = "POST /devins/{session_id}/release";
    /// Listing outposts.
    pub const LIST_OUTPOSTS: &str = "GET /outposts";
    /// Creating an outpost.
    pub const CREATE_OUTPOST: &str = "POST /outposts";
    /// Reading one outpost.
    pub const GET_OUTPOST: &str = "GET /outposts/{id}";
    /// Deleting an outpost.
    pub const DELETE_OUTPOST: &str = "DELETE /outposts/{id}";
    /// Exchanging a connect code for a token.
    pub const CONNECTION_TOKEN: &str = "POST /outposts/connection-token";
}

/// Counters of one route.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// HTTP requests sent, retries included.
    pub requests: u64,
    /// Of those, how many were automatic retries.
    pub retries: u64,
    /// Responses by HTTP status code (every attempt).
    pub responses: BTreeMap<u16, u64>,
    /// Errors by [`crate::FleetError::kind`], counted once per failed attempt
    /// or stream (transport, timeout, body_too_large, decode, ...). Statuses
    /// the API uses as answers (404 on get, 409 on claim) are not errors here;
    /// see `responses`.
    pub errors: BTreeMap<&'static str, u64>,
    /// List items or watch events dropped because they failed to parse or
    /// validate.
    pub skipped_items: u64,
}

/// A snapshot of all counters, by route template (see [`route`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Counts per route template.
    pub routes: BTreeMap<&'static str, RouteStats>,
}

/// The live counters inside a client.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    routes: Mutex<BTreeMap<&'static str, RouteStats>>,
}

impl Stats {
    fn with(&self, route: &'static str, f: impl FnOnce(&mut RouteStats)) {
        // A poisoned lock only means a panic elsewhere mid-increment; the
        // counters are still usable.
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        f(routes.entry(route).or_default());
    }

    pub(crate) fn request(&self, route: &'static str, retry: bool) {
        self.with(route, |r| {
            r.requests += 1;
            if retry {
                r.retries += 1;
            }
        });
    }

    pub(crate) fn response(&self, route: &'static str, status: u16) {
        self.with(route, |r| *r.responses.entry(status).or_default() += 1);
    }

    pub(crate) fn error(&self, route: &'static str, kind: &'static str) {
        self.with(route, |r| *r.errors.entry(kind).or_default() += 1);
    }

    pub(crate) fn skipped(&self, route: &'static str, n: u64) {
        if n > 0 {
            self.with(route, |r| r.skipped_items += n);
        }
    }

    pub(crate) fn snapshot(&self) -> RequestStats {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        RequestStats {
            routes: routes.clone(),
        }
    }
}
