//! Where a held session is in its life ([`Stage`], as recorded), and the
//! one vocabulary of short stage names ([`StageLabel`]) that tables,
//! metrics, the JSON API and the CLI share.

use serde::{Deserialize, Serialize};

/// Where a held session is in its life, as recorded in the state store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "stage", content = "finish")]
pub enum Stage {
    /// The claim is held; no sandbox exists yet.
    Claimed,
    /// A sandbox is being created and the remote started.
    Starting,
    /// The remote has been started at least once.
    Running,
    /// The session is being wound down this way (snapshot, destroy,
    /// release); resumed after a crash.
    Finishing(Finish),
    /// Nothing left to do.
    Done(Finish),
}

impl Stage {
    /// Whether the session is done.
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Done(_))
    }

    /// A sandbox may exist in this stage.
    pub fn may_have_sandbox(&self) -> bool {
        matches!(self, Self::Starting | Self::Running | Self::Finishing(_))
    }

    /// The stage's short name.
    pub fn label(&self) -> StageLabel {
        match self {
            Self::Claimed => StageLabel::Claimed,
            Self::Starting => StageLabel::Starting,
            Self::Running => StageLabel::Running,
            Self::Finishing(_) => StageLabel::Finishing,
            Self::Done(Finish::Suspended) => StageLabel::Suspended,
            Self::Done(Finish::Terminated) => StageLabel::Terminated,
            Self::Done(Finish::Vanished) => StageLabel::Vanished,
            Self::Done(Finish::Failed) => StageLabel::Failed,
            Self::Done(Finish::Released) => StageLabel::Released,
            Self::Done(Finish::Stopped { .. }) => StageLabel::Stopped,
        }
    }
}

/// How a session's time with this orchestrator ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// Devin put the session to sleep: snapshot kept for the resume.
    Suspended,
    /// The session is over: snapshots deleted.
    Terminated,
    /// The entry left the queue while the session ran (or another acceptor
    /// took its claim): not ours to run now, and no final status was read.
    /// The workspace is kept as a recovery snapshot (never deleted because
    /// an entry is missing) and nothing is released.
    Vanished,
    /// The final state could not be established, or the remote kept
    /// crashing: a recovery snapshot is kept and the session is reported.
    Failed,
    /// The claim was given back before a sandbox started (shutdown, deadline
    /// that could not be met, start failures).
    Released,
    /// The operator asked to terminate the session here (`garrison
    /// terminate`): the sandbox is destroyed and the claim released; the
    /// workspace is snapshotted when `keep_snapshot`, else every snapshot of
    /// the session is deleted.
    Stopped {
        /// Keep a snapshot of the workspace.
        keep_snapshot: bool,
    },
}

/// The short name of a stage, as shown in tables, counted in metrics and
/// sent by the JSON API: one per stage, a done stage named by how it
/// finished. Serialized as [`StageLabel::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageLabel {
    /// Claimed.
    Claimed,
    /// Starting.
    Starting,
    /// Running.
    Running,
    /// Winding down.
    Finishing,
    /// Done: suspended.
    Suspended,
    /// Done: terminated.
    Terminated,
    /// Done: vanished.
    Vanished,
    /// Done: failed.
    Failed,
    /// Done: released.
    Released,
    /// Done: stopped by the operator.
    Stopped,
}

impl StageLabel {
    /// Every label, in the order of a session's life.
    pub const ALL: [StageLabel; 10] = [
        Self::Claimed,
        Self::Starting,
        Self::Running,
        Self::Finishing,
        Self::Suspended,
        Self::Terminated,
        Self::Vanished,
        Self::Failed,
        Self::Released,
        Self::Stopped,
    ];

    /// The label as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Finishing => "finishing",
            Self::Suspended => "suspended",
            Self::Terminated => "terminated",
            Self::Vanished => "vanished",
            Self::Failed => "failed",
            Self::Released => "released",
            Self::Stopped => "stopped",
        }
    }

    /// The label spelled `text`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|label| label.as_str() == text)
    }

    /// The session is done here (`suspended` included).
    pub fn is_done(self) -> bool {
        self.is_final() || self == Self::Suspended
    }

    /// The session will not run here again unless Devin queues it again:
    /// done, but not `suspended` (a suspended session comes back as a
    /// resume).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Terminated | Self::Vanished | Self::Failed | Self::Released | Self::Stopped
        )
    }
}

/// Plain words for logs and event lines: the label of a finished stage,
/// and for an operator's stop whether the snapshot is kept.
impl std::fmt::Display for Finish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Suspended => "suspended",
            Self::Terminated => "terminated",
            Self::Vanished => "vanished",
            Self::Failed => "failed",
            Self::Released => "released",
            Self::Stopped {
                keep_snapshot: true,
            } => "stopped_keeping_snapshot",
            Self::Stopped {
                keep_snapshot: false,
            } => "stopped",
        })
    }
}

/// The stage's label, e.g. `running` or `suspended`.
impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Finishing(finish) => write!(f, "finishing_{finish}"),
            other => f.write_str(other.label().as_str()),
        }
    }
}

impl std::fmt::Display for StageLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
