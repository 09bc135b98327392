//! How a session is wound down: what is kept of its workspace, whether its
//! sandbox waits suspended or goes, what is given back.

use serde::{Deserialize, Serialize};

use fleet::{ReleaseOutcome, SessionStatus};

use super::stage::{Finish, Stage};
use super::terms::EntryObs;

/// Why a snapshot was kept (the wind-down decides it; the store records
/// it beside the snapshot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotReason {
    /// Taken as the session went to sleep.
    Suspend,
    /// Taken of a session whose end here is not a known one: it failed, or
    /// it left the fleet API (or its claim went to another acceptor) before
    /// a final status was read. Kept by age like every snapshot, and not
    /// deleted as an ended session's would be: no one said it ended.
    Recovery,
    /// Kept at the operator's request (`garrison terminate --keep-snapshot`).
    Operator,
}

/// Everything [`plan_wind_down`] looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindDownObs {
    /// How the session ends.
    pub finish: Finish,
    /// A remote ran in the session's sandbox in this claim.
    pub ran_remote: bool,
    /// The backend's suspend keeps memory.
    pub suspend_keeps_memory: bool,
    /// Suspending the sandbox was tried and failed.
    pub suspend_failed: bool,
    /// The backend has no sandbox left to snapshot: a destroy cut short
    /// (Garrison killed after it removed the sandbox's handle) left only
    /// remains. The snapshot a suspend takes comes before its destroy, so
    /// it was kept already; another attempt can never succeed.
    pub sandbox_gone: bool,
}

/// What the wind-down does, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindDown {
    /// Snapshot the workspace, for this reason, before the sandbox goes.
    pub snapshot: Option<SnapshotReason>,
    /// What becomes of the sandbox.
    pub sandbox: SandboxEnd,
    /// Delete every snapshot of the session.
    pub delete_snapshots: bool,
    /// Give the claim back.
    pub release: bool,
}

/// What becomes of the session's sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SandboxEnd {
    /// Suspended: it waits for the resume claim with its memory (the
    /// snapshot is the fallback).
    Suspend,
    /// Destroy it.
    Destroy,
}

/// Decides the wind-down. The executor asks again after a suspend failed,
/// and destroys the sandbox then (the snapshot remains).
pub(crate) fn plan_wind_down(obs: &WindDownObs) -> WindDown {
    let snapshot = match obs.finish {
        Finish::Suspended => Some(SnapshotReason::Suspend),
        // No final status was read: whether the session sleeps or ended is
        // unknown, so the work is kept as one kept for recovery.
        Finish::Vanished | Finish::Failed => Some(SnapshotReason::Recovery),
        // Only a sandbox a remote ran in holds work worth keeping (a
        // half-made one would shadow the snapshot it came from).
        Finish::Stopped {
            keep_snapshot: true,
        } if obs.ran_remote => Some(SnapshotReason::Operator),
        Finish::Terminated | Finish::Released | Finish::Stopped { .. } => None,
    };
    let snapshot = snapshot.filter(|_| !obs.sandbox_gone);
    let sandbox = if obs.finish == Finish::Suspended
        && obs.suspend_keeps_memory
        && !obs.suspend_failed
        && !obs.sandbox_gone
    {
        SandboxEnd::Suspend
    } else {
        SandboxEnd::Destroy
    };
    WindDown {
        snapshot,
        sandbox,
        delete_snapshots: matches!(
            obs.finish,
            Finish::Terminated
                | Finish::Stopped {
                    keep_snapshot: false
                }
        ),
        // A vanished session is not ours to give back: it is someone
        // else's, or no one's.
        release: obs.finish != Finish::Vanished,
    }
}

/// Why a wind-down is beginning, said in the session's events before it
/// begins: what a reader finding a recovery snapshot and no final status
/// needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FinishNote {
    /// The entry left the fleet API (removed from the queue, a read or a
    /// renewal answered 404) before any final status was read.
    FinalStatusUnknown,
    /// The claim was lost (it lapsed or went to another acceptor), and
    /// asked afterwards the fleet API no longer has the session (404): no
    /// final status will be read here.
    GoneAfterTheClaimWasLost,
}

impl FinishNote {
    /// The event's kind.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Self::FinalStatusUnknown | Self::GoneAfterTheClaimWasLost => "final_status_unknown",
        }
    }

    /// The event's `reason`, in plain words.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::FinalStatusUnknown => {
                "the session is gone from the fleet API (404) and no final status arrived; \
                 its workspace is kept as a recovery snapshot"
            }
            Self::GoneAfterTheClaimWasLost => {
                "the claim was lost, and the session has since left the fleet API (404) \
                 without a final status read here; its workspace is kept as a recovery snapshot"
            }
        }
    }
}

/// What to note as a session begins to wind down this way, given what the
/// queue last said of its entry. A session that vanished with its entry
/// gone never had a final status read; one that vanished because another
/// acceptor took its claim has its own `claim_lost` event.
pub(crate) fn finish_note(finish: Finish, entry: &EntryObs) -> Option<FinishNote> {
    match (finish, entry) {
        (Finish::Vanished, EntryObs::Gone) => Some(FinishNote::FinalStatusUnknown),
        _ => None,
    }
}

/// What to note once a session this host lost was asked about: an entry
/// gone (`gone`) means its final status will never be read here, said
/// unless the session's events say so already (`noted`, also from before
/// a restart).
pub(crate) fn lost_session_note(gone: bool, noted: bool) -> Option<FinishNote> {
    (gone && !noted).then_some(FinishNote::GoneAfterTheClaimWasLost)
}

/// What a suspend does with its snapshots once its claim was given back
/// (with `outcome`), beyond keeping them for the resume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterRelease {
    /// Keep them: the session sleeps, and its resume needs them.
    Keep,
    /// Ask whether the session is over, as for a lost one: the release was
    /// refused (the claim had lapsed and gone to another acceptor, which
    /// may have resumed and ended the session before this snapshot was
    /// stored, and no one else would delete it), found no entry (the
    /// session ended and left the queue), or got no answer at all.
    Ask,
    /// Delete them: the fleet API's last answer (a renewal during the
    /// suspend, after the claim had lapsed and the session ended
    /// elsewhere) showed the session terminated.
    Delete,
}

/// See [`AfterRelease`]; `entry` is what the fleet API last said of the
/// session.
pub(crate) fn after_release(
    finish: Finish,
    outcome: Option<ReleaseOutcome>,
    entry: &EntryObs,
) -> AfterRelease {
    if finish != Finish::Suspended {
        return AfterRelease::Keep;
    }
    if matches!(entry, EntryObs::Present(SessionStatus::Terminated)) {
        return AfterRelease::Delete;
    }
    match outcome {
        Some(ReleaseOutcome::Released) => AfterRelease::Keep,
        // Bench chaos, seed 9589864553973519679: a full disk held a
        // suspend's snapshot until after the claim had lapsed and another
        // host had resumed and ended the session; the release found the
        // entry gone (404), and the late snapshot stayed.
        Some(ReleaseOutcome::NotHolder | ReleaseOutcome::Gone) | None => AfterRelease::Ask,
    }
}

/// Whether the minute's sweep asks again if a session is over: one this
/// host lost (`stage`: vanished, or suspended without its release going
/// through) and asked about (`last_asked`, the status of its latest
/// `asked_if_over` event), whose recorded snapshots are still kept, until
/// an answer is final: `terminated` deletes the snapshots (so the session
/// is asked about no more unless the deletion failed), `gone` keeps them
/// for the retention period. An unanswered question, or a session alive
/// when asked, may still end with no one left to delete what this host
/// wrote. A suspended session whose release went through was never asked.
pub(crate) fn asks_again(stage: Stage, last_asked: Option<&str>, gone: &str) -> bool {
    matches!(
        stage,
        Stage::Done(Finish::Vanished) | Stage::Done(Finish::Suspended)
    ) && last_asked.is_some_and(|status| status != gone)
}

#[cfg(test)]
mod tests;
