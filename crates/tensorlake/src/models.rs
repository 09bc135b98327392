//! Wire types of Tensorlake's sandbox API, as its SDKs send and read them
//! (`crates/cloud-sdk/src/sandboxes/models.rs`,
//! `src/tensorlake/sandbox/models.py` in
//! <https://github.com/tensorlakeai/tensorlake>).
//!
//! Answers are read tolerantly: unknown fields are ignored and unknown enum
//! values kept as `Unknown`, so a server that grows a status does not break
//! Garrison.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A string enum that keeps values it does not know (at most 64 chars).
macro_rules! open_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)+
            Unknown(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)+
                    Self::Unknown(other) => other,
                }
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $($text => Self::$variant,)+
                    other => Self::Unknown(other.chars().take(64).collect()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok(Self::from(String::deserialize(d)?.as_str()))
            }
        }
    };
}

open_enum!(
    /// A sandbox's lifecycle state.
    SandboxStatus {
        Pending = "pending",
        Running = "running",
        Snapshotting = "snapshotting",
        Suspending = "suspending",
        Suspended = "suspended",
        Terminated = "terminated",
        Timeout = "timeout",
        Failed = "failed",
    }
);

impl SandboxStatus {
    /// The sandbox is gone for good.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Terminated | Self::Timeout | Self::Failed)
    }
}

open_enum!(
    /// A snapshot's state.
    SnapshotStatus {
        InProgress = "in_progress",
        LocalReady = "local_ready",
        Completed = "completed",
        Replicating = "replicating",
        Failed = "failed",
        Deleting = "deleting",
    }
);

impl SnapshotStatus {
    /// A sandbox can be restored from it (the SDK waits for `local_ready`
    /// by default; `completed` only adds replication).
    pub fn is_usable(&self) -> bool {
        matches!(self, Self::LocalReady | Self::Replicating | Self::Completed)
    }

    /// It will never be usable.
    pub fn is_dead(&self) -> bool {
        matches!(self, Self::Failed | Self::Deleting)
    }
}

open_enum!(
    /// What a snapshot keeps.
    SnapshotType {
        Memory = "memory",
        Filesystem = "filesystem",
    }
);

open_enum!(
    /// A process's state as the sandbox daemon reports it.
    ProcessState {
        Running = "running",
        Exited = "exited",
        Signaled = "signaled",
        OomKilled = "oom_killed",
    }
);

open_enum!(
    /// When the daemon restarts a managed process.
    RestartPolicy {
        Never = "never",
        OnFailure = "on_failure",
        Always = "always",
    }
);

/// `resources` of a create request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: f64,
    pub memory_mb: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
}

/// Egress rules: with `allow_out` not empty, only those destinations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkConfig {
    #[serde(default = "yes")]
    pub allow_internet_access: bool,
    #[serde(default)]
    pub allow_out: Vec<String>,
    #[serde(default)]
    pub deny_out: Vec<String>,
}

fn yes() -> bool {
    true
}

/// `POST /sandboxes`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateSandbox {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub resources: Resources,
    /// Idle seconds before a named sandbox is suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfig>,
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
    pub sandbox_id: String,
    /// `running`, `timeout` (still queued: `pending`), `failed`, or
    /// `pending` from a service that answers before the sandbox runs.
    #[serde(alias = "state")]
    pub status: SandboxStatus,
    /// Why a start failed.
    #[serde(default)]
    pub termination_reason: Option<String>,
    #[serde(default)]
    pub error_details: Option<serde_json::Value>,
    #[serde(default)]
    pub sandbox_url: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// `GET /sandboxes/{id}` and the items of `GET /sandboxes`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SandboxInfo {
    #[serde(alias = "id")]
    pub sandbox_id: String,
    pub status: SandboxStatus,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub sandbox_url: Option<String>,
    #[serde(default)]
    pub timeout_secs: Option<i64>,
    #[serde(default)]
    pub termination_reason: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct SandboxList {
    pub sandboxes: Vec<SandboxInfo>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_type: Option<SnapshotType>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct CreatedSnapshot {
    pub snapshot_id: String,
    pub status: SnapshotStatus,
}

/// `GET /snapshots/{id}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SnapshotInfo {
    #[serde(alias = "id")]
    pub snapshot_id: String,
    #[serde(default)]
    pub sandbox_id: Option<String>,
    pub status: SnapshotStatus,
    #[serde(default)]
    pub size_bytes: Option<i64>,
    #[serde(default)]
    pub base_image: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub(crate) struct SnapshotList {
    pub snapshots: Vec<SnapshotInfo>,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `restart` of a process start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RestartConfig {
    pub policy: RestartPolicy,
}

/// `POST /api/v1/processes`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct StartProcess {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// A managed process's name: addressable instead of its pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
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
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// A process as the daemon reports it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ProcessInfo {
    pub pid: i64,
    pub status: ProcessState,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub signal: Option<i64>,
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// When it started, in whichever form the daemon sent.
    #[serde(default)]
    pub started_at: Option<crate::timestamp::Timestamp>,
    #[serde(default)]
    pub managed: Option<ManagedInfo>,
}

/// `GET /api/v1/processes`.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct ProcessList {
    pub processes: Vec<ProcessInfo>,
}

/// `GET /api/v1/processes/{pid_or_name}/output`: every line so far.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct OutputResponse {
    #[serde(default)]
    pub pid: Option<i64>,
    pub lines: Vec<String>,
    #[serde(default)]
    pub line_count: Option<i64>,
}

/// One event of `GET /api/v1/processes/{pid_or_name}/output/follow`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct OutputEvent {
    pub line: String,
    #[serde(default)]
    pub stream: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct SignalRequest {
    pub signal: i32,
}

/// `POST /api/v1/pty`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatePty {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    pub rows: u16,
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
    pub session_id: String,
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
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
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
