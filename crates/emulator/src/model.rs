//! Public data types of the emulator: what a test asks for (a session and
//! its script) and what it can inspect afterwards (a session's view and
//! transcript). They are plain serde types so the admin API can carry them.

use fleet::{NetworkPolicy, Platform, QueueEntry, SessionKind, SessionStatus};
use serde::{Deserialize, Serialize};

/// A session to enqueue on an outpost, with the script the brain will drive.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NewSession {
    /// The outpost whose queue the session joins.
    pub outpost_id: String,
    /// Generated as `devin-<hex>` when absent.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Defaults to `new`.
    #[serde(default)]
    pub kind: Option<SessionKind>,
    /// Defaults to the outpost's platform.
    #[serde(default)]
    pub platform: Option<Platform>,
    /// The `devin-remote` build the claim names; defaults to the latest.
    #[serde(default)]
    pub remote_binary_sha: Option<String>,
    /// The network policy on the queue row, if any.
    #[serde(default)]
    pub network_policy: Option<NetworkPolicy>,
    /// What the brain makes the remote do.
    #[serde(default)]
    pub script: Script,
}

/// What the brain makes a connected remote do, in order, and how the
/// session ends once every step is done.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Script {
    /// The steps, in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// How the session ends after the last step.
    #[serde(default)]
    pub then: Then,
}

/// One step of a [`Script`]. A step whose result arrived is done and is never
/// sent again, so a reconnecting or resumed remote continues where the last
/// one stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// `sh -c command` in the remote's working directory.
    Run {
        /// The shell command line.
        command: String,
    },
    /// Write a file relative to the remote's working directory.
    Write {
        /// Where, relative to the working directory.
        path: String,
        /// The whole file, as text.
        content: String,
    },
    /// The remote exits with `code`, on `times` connections in a row; after
    /// that the step counts as done.
    Crash {
        /// The exit code.
        code: i32,
        /// On how many connections in a row.
        times: u32,
    },
}

/// How a session ends after its last step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Then {
    /// The remote is told `end`; the session becomes `terminated`.
    #[default]
    End,
    /// The remote is told `sleep`; the session becomes `suspended`.
    Sleep,
    /// Stay running until the admin API suspends or terminates the session.
    Wait,
}

/// A session as the emulator sees it: its queue row (if any), its status and
/// everything that happened to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SessionView {
    /// The session's id.
    pub session_id: String,
    /// The outpost whose queue it is on.
    pub outpost_id: String,
    /// The queue row, `None` once it was removed.
    pub entry: Option<QueueEntry>,
    /// The status clients read.
    pub session_status: SessionStatus,
    /// How many remotes were accepted by the gateway for this session.
    pub connections: u32,
    /// Whether a remote is connected right now.
    pub connected: bool,
    /// How many steps of the current script are done.
    pub steps_done: usize,
    /// Everything that happened to it, oldest first.
    pub transcript: Vec<TranscriptEvent>,
}

/// One line of a session's history. `kind` is one of `enqueued`, `claimed`,
/// `renewed`, `claim_expired`, `released`, `connected`, `hello`, `step`,
/// `stop`, `disconnected`, `duplicate_connection`, `status`, `resumed`,
/// `entry_removed`, `unexpected_result`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEvent {
    /// When, in Unix milliseconds.
    pub at_ms: i64,
    /// What happened (see the list above).
    pub kind: String,
    /// The particulars, shaped by `kind`.
    pub detail: serde_json::Value,
}

impl SessionView {
    /// The transcript events of one kind, in order.
    pub fn events(&self, kind: &str) -> impl Iterator<Item = &TranscriptEvent> {
        self.transcript.iter().filter(move |e| e.kind == kind)
    }
}
