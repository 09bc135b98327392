//! What the admin handlers share, and how ready it says Garrison is.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::Secret;

use crate::serving::Serving;
use crate::settings::{OutpostConfig, QueueMode, ServeConfig};

/// A queue view is fresh when synced within this many re-list intervals.
const FRESH_INTERVALS: u32 = 3;

/// What the handlers share.
pub(crate) struct AdminState {
    /// What the running `serve` shares.
    pub serving: Arc<Serving>,
    /// The outposts served.
    pub outposts: Vec<OutpostConfig>,
    /// `<state-dir>/sessions`: the per-session logs.
    pub sessions_dir: PathBuf,
    /// How recently every queue view must have synced for `/readyz`.
    pub fresh_within: Duration,
    /// When serving started.
    pub started_at_ms: i64,
    /// Garrison's version.
    pub version: &'static str,
    /// What a request that needs it must present (see [`super::token`]).
    pub token: Secret,
}

impl AdminState {
    /// The state for `config`, answering with `serving` and checking `token`.
    pub(crate) fn new(config: &ServeConfig, serving: Arc<Serving>, token: Secret) -> Self {
        let every = match config.queue_mode {
            QueueMode::Watch => config.relist_interval,
            QueueMode::Poll(every) => every,
        };
        Self {
            serving,
            outposts: config.outposts.clone(),
            sessions_dir: config.state_dir.join("sessions"),
            fresh_within: (every * FRESH_INTERVALS).max(Duration::from_secs(1)),
            started_at_ms: chrono::Utc::now().timestamp_millis(),
            version: env!("CARGO_PKG_VERSION"),
            token,
        }
    }

    /// `Ok` when ready; else why not. Not ready while the state directory
    /// is short of room (see `crate::room`). Every queue view is confirmed only by
    /// a successful fleet API answer (a list or a watch event), so a fresh
    /// view also means the API was reachable that recently. A queue the API
    /// refuses (401, 403, 404) is not ready however fresh its view: a watch
    /// opened before the refusal may still be delivering events.
    pub(crate) fn readiness(&self, now_ms: i64) -> Result<(), String> {
        let limit = self.fresh_within.as_millis() as i64;
        let mut not_ready: Vec<String> = self
            .serving
            .views
            .iter()
            .filter_map(|v| {
                let at = v.synced_at();
                if let Some(refused) = v.refusal.current() {
                    Some(format!("outpost {}: {refused}", v.outpost_id()))
                } else if at == 0 {
                    Some(format!(
                        "outpost {}: the queue has not been listed yet",
                        v.outpost_id()
                    ))
                } else if now_ms - at > limit {
                    Some(format!(
                        "outpost {}: the queue view was last confirmed by the fleet API {} s ago (limit {} s)",
                        v.outpost_id(),
                        (now_ms - at) / 1000,
                        limit / 1000
                    ))
                } else {
                    None
                }
            })
            .collect();
        // Ready means able to take sessions on: not while nothing new is
        // claimed for want of room.
        not_ready.extend(self.serving.room.shortage());
        if not_ready.is_empty() {
            Ok(())
        } else {
            Err(not_ready.join("; "))
        }
    }
}
