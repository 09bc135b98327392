//! Wire types of Tensorlake's sandbox API, as its SDKs send and read them
//! (`crates/cloud-sdk/src/sandboxes/models.rs`,
//! `src/tensorlake/sandbox/models.py` in
//! <https://github.com/tensorlakeai/tensorlake>).
//!
//! Answers are read tolerantly: unknown fields are ignored and unknown enum
//! values kept as `Unknown`, so a server that grows a status does not break
//! Garrison.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod states;

pub use states::{ProcessState, RestartPolicy, SandboxStatus, SnapshotStatus, SnapshotType};

/// `resources` of a create request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// CPUs, possibly fractional.
    pub cpus: f64,
    /// Memory in MiB.
    pub memory_mb: u64,
    /// Disk in MiB; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
}

/// Egress rules: with `allow_out` not empty, only those destinations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkConfig {
    /// Whether the sandbox may reach the internet (`true` when absent).
    #[serde(default = "yes")]
    pub allow_internet_access: bool,
    /// Destinations allowed out; when not empty, the only ones reachable.
    #[serde(default)]
    pub allow_out: Vec<String>,
    /// Destinations refused.
    #[serde(default)]
    pub deny_out: Vec<String>,
}

fn yes() -> bool {
    true
}

/// `POST /sandboxes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateSandbox {
    /// Image to start from; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// CPU, memory and disk to give the sandbox.
    pub resources: Resources,
    /// Idle seconds before a named sandbox is suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Egress rules; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfig>,
    /// Snapshot to restore the sandbox from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    /// Only named sandboxes can be suspended and resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether traffic to a suspended sandbox wakes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<bool>,
}

/// The answer to `POST /sandboxes`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct CreatedSandbox {
    /// The new sandbox's id.
    pub sandbox_id: String,
    /// `running`, `timeout` (still queued: `pending`), `failed`, or
    /// `pending` from a service that answers before the sandbox runs.
    #[serde(alias = "state")]
    pub status: SandboxStatus,
    /// Why a start failed.
    #[serde(default)]
    pub termination_reason: Option<String>,
    /// More about a failed start (JSON, may hold a `message`).
    #[serde(default)]
    pub error_details: Option<serde_json::Value>,
    /// The sandbox's proxy URL, when the server gives one.
    #[serde(default)]
    pub sandbox_url: Option<String>,
    /// The sandbox's name, if it has one.
    #[serde(default)]
    pub name: Option<String>,
}

/// `GET /sandboxes/{id}` and the items of `GET /sandboxes`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SandboxInfo {
    /// The sandbox's id (also read from `id`).
    #[serde(alias = "id")]
    pub sandbox_id: String,
    /// Its lifecycle state.
    pub status: SandboxStatus,
    /// Its name, if it has one.
    #[serde(default)]
    pub name: Option<String>,
    /// The image it runs.
    #[serde(default)]
    pub image: Option<String>,
    /// Its proxy URL, when the server gives one.
    #[serde(default)]
    pub sandbox_url: Option<String>,
    /// Idle seconds before it is suspended.
    #[serde(default)]
    pub timeout_secs: Option<i64>,
    /// Why it ended, if it did.
    #[serde(default)]
    pub termination_reason: Option<String>,
}

/// `GET /sandboxes`: one page of sandboxes.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct SandboxList {
    /// The page's sandboxes.
    pub sandboxes: Vec<SandboxInfo>,
    /// Where the next page starts; absent or empty on the last.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One page of a listing: its items and where the next page starts.
pub(crate) trait Page: serde::de::DeserializeOwned {
    type Item;
    fn into_page(self) -> (Vec<Self::Item>, Option<String>);
}

impl Page for SandboxList {
    type Item = SandboxInfo;
    fn into_page(self) -> (Vec<SandboxInfo>, Option<String>) {
        (self.sandboxes, self.cursor)
    }
}

impl Page for SnapshotList {
    type Item = SnapshotInfo;
    fn into_page(self) -> (Vec<SnapshotInfo>, Option<String>) {
        (self.snapshots, self.cursor)
    }
}

/// The cursors a listing has followed: it ends at a page without one, and
/// a cursor seen twice (a loop) or too many pages are errors.
#[derive(Default)]
pub struct Cursors {
    seen: std::collections::HashSet<String>,
}

/// Most pages followed (about 100,000 items).
const MAX_PAGES: usize = 1000;

impl Cursors {
    /// The cursor to ask for next, `None` when the listing is complete.
    pub fn next(&mut self, cursor: Option<String>) -> Result<Option<String>, String> {
        let Some(cursor) = cursor.filter(|c| !c.is_empty()) else {
            return Ok(None);
        };
        if self.seen.len() >= MAX_PAGES {
            return Err(format!("more than {MAX_PAGES} pages"));
        }
        if !self.seen.insert(cursor.clone()) {
            return Err(format!("cursor {cursor:?} came back"));
        }
        Ok(Some(cursor))
    }
}

/// `POST /sandboxes/{id}/snapshot`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateSnapshot {
    /// What the snapshot keeps; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_type: Option<SnapshotType>,
}

/// The answer to `POST /sandboxes/{id}/snapshot`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct CreatedSnapshot {
    /// The new snapshot's id.
    pub snapshot_id: String,
    /// Its state.
    pub status: SnapshotStatus,
}

/// `GET /snapshots/{id}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SnapshotInfo {
    /// The snapshot's id (also read from `id`).
    #[serde(alias = "id")]
    pub snapshot_id: String,
    /// The sandbox it was taken from.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Its state.
    pub status: SnapshotStatus,
    /// Its size in bytes.
    #[serde(default)]
    pub size_bytes: Option<i64>,
    /// The image of the sandbox it was taken from.
    #[serde(default)]
    pub base_image: Option<String>,
    /// Why it failed, if it did.
    #[serde(default)]
    pub error: Option<String>,
}

/// `GET /snapshots`: one page of snapshots.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct SnapshotList {
    /// The page's snapshots.
    pub snapshots: Vec<SnapshotInfo>,
    /// Where the next page starts; absent or empty on the last.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `restart` of a process start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RestartConfig {
    /// When the daemon restarts the process.
    pub policy: RestartPolicy,
}

/// `POST /api/v1/processes`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct StartProcess {
    /// Program to run.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables to set.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// A managed process's name: addressable instead of its pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When the daemon restarts it; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartConfig>,
}

impl std::fmt::Debug for StartProcess {
    /// The environment may hold tokens: only its keys print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartProcess")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("working_dir", &self.working_dir)
            .field("name", &self.name)
            .finish()
    }
}

/// A managed process's identity.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ManagedInfo {
    /// The managed process's id.
    #[serde(default)]
    pub id: Option<String>,
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
}

/// A process as the daemon reports it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: i64,
    /// Its state.
    pub status: ProcessState,
    /// Exit code, once it has exited.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// Number of the signal that ended it, if one did.
    #[serde(default)]
    pub signal: Option<i64>,
    /// Program it runs.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// When it started, in whichever form the daemon sent.
    #[serde(default)]
    pub started_at: Option<crate::timestamp::Timestamp>,
    /// Its identity, if it is a managed process.
    #[serde(default)]
    pub managed: Option<ManagedInfo>,
}

/// `GET /api/v1/processes`.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct ProcessList {
    /// The processes.
    pub processes: Vec<ProcessInfo>,
}

/// `GET /api/v1/processes/{pid_or_name}/output`: every line so far.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct OutputResponse {
    /// The process's pid.
    #[serde(default)]
    pub pid: Option<i64>,
    /// Every output line so far.
    pub lines: Vec<String>,
    /// Number of lines, as the daemon reports it.
    #[serde(default)]
    pub line_count: Option<i64>,
}

/// One event of `GET /api/v1/processes/{pid_or_name}/output/follow`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct OutputEvent {
    /// One line of output.
    pub line: String,
    /// The stream it came from (`stdout` or `stderr`).
    #[serde(default)]
    pub stream: Option<String>,
}

/// `POST /api/v1/processes/{pid_or_name}/signal`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SignalRequest {
    /// Number of the signal to send.
    pub signal: i32,
}

/// `POST /api/v1/pty`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatePty {
    /// Program to run in the terminal.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables to set.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory; left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Terminal height in rows.
    pub rows: u16,
    /// Terminal width in columns.
    pub cols: u16,
}

impl std::fmt::Debug for CreatePty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatePty")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A PTY session: attach to it over the websocket with its token.
#[derive(Clone, PartialEq, Deserialize)]
pub struct PtySession {
    /// The session's id.
    pub session_id: String,
    /// Token that authorizes attaching to the session.
    pub token: String,
}

impl std::fmt::Debug for PtySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtySession")
            .field("session_id", &self.session_id)
            .finish()
    }
}

/// An error answer: `{"error": "...", "code": "..."}` (some answers use
/// `message` instead of `error`).
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct ErrorBody {
    /// The error message.
    #[serde(default)]
    pub error: Option<String>,
    /// The message, in answers that use `message` instead of `error`.
    #[serde(default)]
    pub message: Option<String>,
    /// The error's code.
    #[serde(default)]
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_statuses_are_kept() {
        let info: SandboxInfo =
            serde_json::from_str(r#"{"id":"sb1","status":"migrating","extra":1}"#).unwrap();
        assert_eq!(info.status, SandboxStatus::Unknown("migrating".into()));
        let info: SandboxInfo =
            serde_json::from_str(r#"{"sandbox_id":"sb1","status":"suspended"}"#).unwrap();
        assert_eq!(info.status, SandboxStatus::Suspended);
    }

    #[test]
    fn create_request_shape() {
        let body = CreateSandbox {
            image: Some("img".into()),
            resources: Resources {
                cpus: 2.0,
                memory_mb: 8192,
                disk_mb: Some(10240),
            },
            timeout_secs: Some(1800),
            network: None,
            snapshot_id: None,
            name: Some("garrison-0".into()),
            auto_resume: Some(false),
        };
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({"image":"img","resources":{"cpus":2.0,"memory_mb":8192,"disk_mb":10240},
                "timeout_secs":1800,"name":"garrison-0","auto_resume":false})
        );
    }
}
