//! The start plan: which sandbox a start uses. The executor performs one
//! step of the plan, reports what it found (the sandbox it meant to resume
//! is gone, the snapshot it meant to restore is gone) and asks again, so
//! every fallback is decided here.

use fleet::SessionKind;

/// Everything [`plan_start`] looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StartObs {
    /// The entry's kind as claimed: only a resume may pick up a kept sandbox.
    pub kind: SessionKind,
    /// A sandbox exists under the session's name (recorded here, or listed
    /// by the backend).
    pub sandbox_found: bool,
    /// A remote process is recorded for the session: the sandbox found ran
    /// one in this claim, so it is not the one suspended for the resume.
    pub remote_recorded: bool,
    /// The backend's suspend keeps memory, so a suspended session's sandbox
    /// itself waits for the resume.
    pub suspend_keeps_memory: bool,
    /// What is known of the snapshot.
    pub snapshot: SnapshotObs,
    /// The operator lets a session whose snapshot fails its integrity check
    /// start fresh (else it fails, and the snapshot is kept).
    pub corrupt_snapshot_starts_fresh: bool,
    /// What failed last in this start.
    pub failed: Option<StartFailure>,
}

/// The session's newest snapshot that still exists, as far as looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SnapshotObs {
    /// Not looked for yet.
    NotLookedUp,
    /// None exists.
    None,
    /// One exists.
    Available,
}

/// A step of the start that failed in a way that changes the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartFailure {
    /// Resuming the kept sandbox failed for good (a passing failure fails
    /// the whole start instead, so the kept memory is tried again).
    ResumeFailed,
    /// The snapshot to restore from was gone when the sandbox was created.
    RestoreGone,
    /// The snapshot to restore from failed its integrity check (its hash,
    /// its decryption).
    RestoreCorrupt,
    /// The snapshot is intact but cannot be restored, for a reason no
    /// other attempt mends (a path longer than `PATH_MAX`, a restore past
    /// its time bound).
    RestoreUnrestorable,
}

/// The next step of a start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartPlan {
    /// Resume the sandbox found, suspended with its memory: the workspace is
    /// there as the session left it.
    Reuse,
    /// Destroy the sandbox found, to start over cleanly: it was left by an
    /// interrupted start (the process is recorded before it is spawned, so
    /// it never ran a remote), or it could not be resumed.
    Discard,
    /// Look up the session's newest snapshot that still exists.
    FindSnapshot,
    /// Create a sandbox restored from that snapshot.
    Restore,
    /// Create an empty sandbox; the repositories are cloned into it.
    Fresh(FreshReason),
    /// Fail the session: its snapshot failed its integrity check, and is
    /// kept for inspection rather than silently replaced.
    FailCorrupt,
    /// Give the session up here: its snapshot cannot be restored. It is
    /// kept for the operator (never replaced by a fresh start, which would
    /// lose the work it holds), the claim is released with the reason, and
    /// the session is marked so this Garrison does not claim it again.
    GiveUpUnrestorable,
}

impl StartPlan {
    /// The sandbox this step yields already holds the session's workspace
    /// (so nothing is cloned into it).
    pub(crate) fn keeps_workspace(self) -> bool {
        matches!(self, Self::Reuse | Self::Restore)
    }
}

/// Why a start creates an empty sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FreshReason {
    /// Nothing to restore: a new session without a snapshot.
    New,
    /// A resume that found no snapshot to restore from.
    NoSnapshot,
    /// The snapshot to restore from vanished before the restore.
    SnapshotGone,
    /// The snapshot to restore from failed its integrity check, and the
    /// operator allows starting afresh then.
    SnapshotCorrupt,
}

/// Decides the next step of a start.
pub(crate) fn plan_start(obs: &StartObs) -> StartPlan {
    if obs.sandbox_found {
        let resumable = obs.kind == SessionKind::Resume
            && !obs.remote_recorded
            && obs.suspend_keeps_memory
            && obs.failed != Some(StartFailure::ResumeFailed);
        return if resumable {
            StartPlan::Reuse
        } else {
            StartPlan::Discard
        };
    }
    if obs.failed == Some(StartFailure::RestoreGone) {
        return StartPlan::Fresh(FreshReason::SnapshotGone);
    }
    if obs.failed == Some(StartFailure::RestoreUnrestorable) {
        return StartPlan::GiveUpUnrestorable;
    }
    if obs.failed == Some(StartFailure::RestoreCorrupt) {
        return if obs.corrupt_snapshot_starts_fresh {
            StartPlan::Fresh(FreshReason::SnapshotCorrupt)
        } else {
            StartPlan::FailCorrupt
        };
    }
    match obs.snapshot {
        SnapshotObs::NotLookedUp => StartPlan::FindSnapshot,
        SnapshotObs::Available => StartPlan::Restore,
        SnapshotObs::None if obs.kind == SessionKind::Resume => {
            StartPlan::Fresh(FreshReason::NoSnapshot)
        }
        SnapshotObs::None => StartPlan::Fresh(FreshReason::New),
    }
}

#[cfg(test)]
mod tests;
