//! The planner's shared vocabulary: time in milliseconds, what is observed
//! of a session's entry and remote, an operator's stop, and the policy's
//! knobs. A leaf: the planner's decisions import it, it imports none of
//! them.

use fleet::SessionStatus;
use serde::{Deserialize, Serialize};

use super::output::DEFAULT_SESSION_LOG_MAX_BYTES;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// An operator's request to stop a session (`garrison terminate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStop {
    /// Keep a snapshot of the workspace.
    pub keep_snapshot: bool,
}

/// The remote process as last observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteObs {
    /// No remote started in this sandbox yet.
    NotStarted,
    /// The remote runs.
    Running,
    /// The remote exited with this code.
    Exited(i32),
    /// Stopped with no known exit code (its sandbox or supervisor was lost).
    Lost,
}

/// The session's queue entry as last observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EntryObs {
    /// Not seen since this orchestrator started.
    Unknown,
    /// Removed from the queue (a `DELETED` event or a 404).
    Gone,
    /// The entry is in the queue, with this session status.
    Present(SessionStatus),
}

/// Plain words for logs: `running`, `exited_1`, `lost`.
impl std::fmt::Display for RemoteObs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotStarted => f.write_str("not_started"),
            Self::Running => f.write_str("running"),
            Self::Exited(code) => write!(f, "exited_{code}"),
            Self::Lost => f.write_str("lost"),
        }
    }
}

/// Plain words for logs: `unknown`, `gone`, or the session's status as
/// the API spells it (`running`, `suspended`, ...).
impl std::fmt::Display for EntryObs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown => f.write_str("unknown"),
            Self::Gone => f.write_str("gone"),
            Self::Present(status) => write!(f, "{status}"),
        }
    }
}

/// [`Policy::suspend_exit_grace_ms`] unless set.
pub(crate) const DEFAULT_SUSPEND_EXIT_GRACE_MS: Millis = 120_000;

/// Timing and limits of the session lifecycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Renew the claim when its deadline is this close (observed margin: 60 s).
    pub renew_margin_ms: Millis,
    /// How long a remote may keep running once its session reads
    /// `suspended` before it is killed. Devin tells a sleeping session's
    /// remote, which then exits 0 by itself; the docs ask an orchestrator
    /// to kill it only when the session is `terminated` or its entry gone.
    /// The kill is the fallback for a remote that never heard (a
    /// `suspended` is also seen briefly on live sessions, which this
    /// outlasts). `suspend_exit_grace_secs`.
    pub suspend_exit_grace_ms: Millis,
    /// Restarts of a remote that exited non-zero before giving up.
    pub max_restarts: u32,
    /// First restart delay; doubles per restart.
    pub restart_backoff_ms: Millis,
    /// The longest wait between restarts.
    pub restart_backoff_max_ms: Millis,
    /// Re-reads of the entry after a clean exit before the final state is
    /// declared unknown (the status lags the exit by seconds).
    pub confirm_attempts: u32,
    /// How often the end of a session is confirmed.
    pub confirm_interval_ms: Millis,
    /// Confirming reads in a row that must say `suspended` after the remote
    /// stopped before the session is wound down as asleep: a live session
    /// can read `suspended` briefly, also while its final status lags the
    /// remote's exit.
    pub suspend_confirmations: u32,
    /// Failed attempts to start a sandbox before the claim is released.
    pub max_start_failures: u32,
    /// Bytes of the remote's output copied into the session log; the rest
    /// is left in the sandbox (see `output_allowance`).
    pub session_log_max_bytes: u64,
    /// A snapshot that fails its integrity check is skipped and the session
    /// starts fresh, instead of failing (`snapshot_integrity_fallback`).
    pub corrupt_snapshot_starts_fresh: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            renew_margin_ms: 60_000,
            suspend_exit_grace_ms: DEFAULT_SUSPEND_EXIT_GRACE_MS,
            max_restarts: 3,
            restart_backoff_ms: 1_000,
            restart_backoff_max_ms: 30_000,
            confirm_attempts: 10,
            confirm_interval_ms: 1_000,
            suspend_confirmations: 3,
            max_start_failures: 3,
            session_log_max_bytes: DEFAULT_SESSION_LOG_MAX_BYTES,
            corrupt_snapshot_starts_fresh: false,
        }
    }
}

impl Policy {
    /// The wait before restart number `restarts`.
    pub fn restart_delay_ms(&self, restarts: u32) -> Millis {
        let factor = 1i64.checked_shl(restarts.min(20)).unwrap_or(i64::MAX);
        self.restart_backoff_ms
            .saturating_mul(factor)
            .min(self.restart_backoff_max_ms)
    }
}
