//! What a step of the runner works with and how it fails: the narrow
//! [`StepCtx`] the step functions take instead of the whole runner, the
//! [`KeepClaim`] hook through which a slow step has the claim renewed, and
//! the typed errors ([`StepError`], [`StartError`]) that set a failed
//! record apart from a step's other failures.

use std::sync::Arc;
use std::time::Duration;

use fleet::SessionId;
use sandbox::Sandbox;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::claim_keeper::keep_claim_alive;
use super::deps::Deps;
use crate::metrics::Metrics;
use crate::session_log::SessionLogs;
use crate::store::{Store, io_out_of_space, is_out_of_space};
use common::now_ms;

/// How long a remote is given to exit before it is killed.
pub(super) const KILL_GRACE: Duration = Duration::from_secs(10);

/// A write to the state store failed: the step it recorded must not run,
/// and the runner stops (see [`super::SessionRunner::run`]).
#[derive(Debug, thiserror::Error)]
#[error("recording the session in the state store failed: {0:#}")]
pub(super) struct RecordFailed(pub(super) anyhow::Error);

/// How a step failed: a failed record stops the runner, any other failure
/// is retried.
#[derive(Debug, thiserror::Error)]
pub(super) enum StepError {
    /// The step could not be recorded (see [`RecordFailed`]).
    #[error(transparent)]
    Record(#[from] RecordFailed),
    /// The step itself failed.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

/// How a start failed, each way handled apart by the runner.
pub(super) enum StartError {
    /// The session must not be started at all (the binary failed
    /// verification): release the claim.
    Refused(String),
    /// Too little claim time left for the next slow step.
    Deadline,
    /// The step could not be recorded: the runner stops.
    Record(RecordFailed),
    /// Anything else: the start is tried again.
    Failed(anyhow::Error),
    /// The snapshot to restore failed its integrity check: the session
    /// fails (the snapshot is kept), since retrying cannot mend it.
    Corrupt(String),
    /// The snapshot is intact but this host cannot restore it: the session
    /// is given up here once (marked in the store, so it is not claimed
    /// here again), the claim released, the snapshot kept.
    Unrestorable {
        /// The snapshot refused.
        snapshot_id: String,
        /// Why the backend refused it.
        reason: String,
    },
}

impl From<StepError> for StartError {
    fn from(e: StepError) -> Self {
        match e {
            StepError::Record(failed) => Self::Record(failed),
            StepError::Failed(e) => Self::Failed(e),
        }
    }
}

/// What a step function needs of the runner's shared dependencies.
#[derive(Clone)]
pub(super) struct StepCtx {
    /// The session the step works for.
    pub(super) session_id: SessionId,
    pub(super) backend: Arc<dyn Sandbox>,
    pub(super) store: Arc<Store>,
    pub(super) logs: SessionLogs,
    pub(super) metrics: Arc<Metrics>,
    pub(super) stopping: CancellationToken,
}

impl StepCtx {
    /// The context of a step for `session_id`.
    pub(super) fn new(deps: &Deps, session_id: SessionId) -> Self {
        Self {
            session_id,
            backend: deps.backend.clone(),
            store: deps.store.clone(),
            logs: deps.logs.clone(),
            metrics: deps.metrics.clone(),
            stopping: deps.stopping.clone(),
        }
    }

    /// The session's id, for logs.
    pub(super) fn id(&self) -> &str {
        self.session_id.as_str()
    }

    /// Adds to the session's history. Events tell what happened; none is
    /// the record a step depends on (that is the session row and the
    /// snapshot rows), so a failed write is logged and the step goes on.
    /// A full disk is told once by the claim loops (see `room.rs`), so an
    /// event lost to it is only a debug line.
    pub(super) fn event(&self, kind: &str, detail: serde_json::Value) {
        let at = now_ms();
        if let Err(e) = self.store.add_event(&self.session_id, at, kind, &detail) {
            if is_out_of_space(&e) {
                debug!(session_id = self.id(), event = kind, error = %e, "recording an event failed");
            } else {
                warn!(session_id = self.id(), event = kind, error = %e, "recording an event failed");
            }
        }
        if let Err(e) = self.logs.event(self.id(), at, kind, &detail) {
            if io_out_of_space(&e) {
                debug!(session_id = self.id(), event = kind, error = %e, "writing an event to the session log failed");
            } else {
                warn!(session_id = self.id(), event = kind, error = %e, "writing an event to the session log failed");
            }
        }
    }

    /// Waits `duration`, or less when Garrison is stopping.
    pub(super) async fn pause(&self, duration: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = self.stopping.cancelled(), if !self.stopping.is_cancelled() => {}
        }
    }
}

/// The runner as a slow step sees it: something that renews the claim when
/// it is due and tells afterwards whether such a renewal failed to record.
pub(super) trait KeepClaim {
    /// How long until the claim must be renewed.
    fn due_in(&self) -> Duration;
    /// Whether enough claim time is left to begin a slow step.
    fn has_budget(&self) -> bool;
    /// Renews the claim, recording what the renewal found; a failed record
    /// is kept for [`KeepClaim::check_renewals`].
    async fn renew_in_step(&mut self);
    /// Stops on a record that failed during the step's renewals.
    fn check_renewals(&mut self) -> Result<(), RecordFailed>;
    /// Whether a renewal during the step found the claim lost (the session
    /// is winding down).
    fn claim_lost(&self) -> bool;
    /// The gateway the remote dials as of now: the claim's (a renewal may
    /// name a new one), else the configured one.
    fn gateway_url(&self) -> Option<String>;
}

/// Runs `step` while `keeper` keeps the claim alive.
pub(super) async fn renewing<K: KeepClaim, T>(keeper: &mut K, step: impl Future<Output = T>) -> T {
    keep_claim_alive(keeper, step, K::due_in, async |k: &mut K| {
        k.renew_in_step().await
    })
    .await
}
