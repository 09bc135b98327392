//! The mock's state and the pure rules of the sandbox state machine.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::http::StatusCode;

use crate::catalog::images::Catalog;
use crate::config::{CreateOutcome, Fault, MockConfig};
use crate::host::Proc;
use crate::pty::session::PtySession;

/// A sandbox's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Pending,
    Running,
    Snapshotting,
    Suspending,
    Suspended,
    /// Never started ([`CreateOutcome::Failed`]).
    Failed,
    /// Deleted; gone once the transition has passed.
    Terminated,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Snapshotting => "snapshotting",
            Self::Suspending => "suspending",
            Self::Suspended => "suspended",
            Self::Failed => "failed",
            Self::Terminated => "terminated",
        }
    }
}

/// Why a lifecycle request is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

fn refuse(status: StatusCode, code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        code,
        message: message.into(),
    }
}

/// What a suspend request does: `Some(next)` moves, `None` is a no-op.
pub(crate) fn on_suspend(status: Status, named: bool) -> Result<Option<Status>, Refusal> {
    if !named {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "SANDBOX_NOT_NAMED",
            "only named sandboxes can be suspended",
        ));
    }
    match status {
        Status::Running => Ok(Some(Status::Suspending)),
        Status::Suspended => Ok(None),
        other => Err(refuse(
            StatusCode::CONFLICT,
            "SANDBOX_IN_TRANSITION",
            format!("cannot suspend a sandbox that is {}", other.as_str()),
        )),
    }
}

/// What a resume request does.
pub(crate) fn on_resume(status: Status, named: bool) -> Result<Option<Status>, Refusal> {
    if !named {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "SANDBOX_NOT_NAMED",
            "only named sandboxes can be resumed",
        ));
    }
    match status {
        Status::Suspended => Ok(Some(Status::Running)),
        Status::Running => Ok(None),
        other => Err(refuse(
            StatusCode::CONFLICT,
            "SANDBOX_IN_TRANSITION",
            format!("cannot resume a sandbox that is {}", other.as_str()),
        )),
    }
}

/// Whether a snapshot may start.
pub(crate) fn on_snapshot(status: Status) -> Result<Status, Refusal> {
    match status {
        Status::Running => Ok(Status::Snapshotting),
        other => Err(refuse(
            StatusCode::CONFLICT,
            "SANDBOX_NOT_RUNNING",
            format!("cannot snapshot a sandbox that is {}", other.as_str()),
        )),
    }
}

/// Tensorlake's sandbox names: DNS labels (lowercase letters, digits and
/// hyphens, 1 to 63, starting and ending with a letter or digit).
pub(crate) fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

pub(crate) struct Sandbox {
    pub id: String,
    pub name: Option<String>,
    pub status: Status,
    pub image: Option<String>,
    pub resources: serde_json::Value,
    pub timeout_secs: u64,
    pub network: Option<serde_json::Value>,
    pub auto_resume: bool,
    /// Unix seconds, as the service's `created_at`.
    pub created_at: f64,
    pub dir: PathBuf,
    pub processes: Vec<Arc<Proc>>,
    pub ptys: HashMap<String, Arc<PtySession>>,
    pub last_activity: Instant,
    pub next_pid: i64,
}

impl Sandbox {
    pub(crate) fn info(&self, url: &str) -> serde_json::Value {
        serde_json::json!({
            "sandbox_id": self.id,
            "namespace": "default",
            "name": self.name,
            "status": self.status.as_str(),
            "image": self.image,
            "resources": self.resources,
            "timeout_secs": self.timeout_secs,
            "network": self.network,
            "network_policy": self.network,
            "auto_resume": self.auto_resume,
            "created_at": self.created_at,
            "sandbox_url": url,
        })
    }

    /// Signals every process group the sandbox runs (processes and PTYs),
    /// as far as each is still its own ([`crate::group`]).
    pub(crate) fn signal_all(&self, signal: nix::sys::signal::Signal) {
        for process in &self.processes {
            process.group.signal(signal);
        }
        for pty in self.ptys.values() {
            pty.group.signal(signal);
        }
    }
}

pub(crate) struct Snapshot {
    pub id: String,
    pub sandbox_id: String,
    pub status: SnapshotStatus,
    pub archive: PathBuf,
    pub size: u64,
    pub base_image: Option<String>,
}

impl Snapshot {
    pub(crate) fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "snapshot_id": self.id,
            "namespace": "default",
            "sandbox_id": self.sandbox_id,
            "status": self.status.as_str(),
            "size_bytes": self.size,
            "base_image": self.base_image,
            "snapshot_type": "filesystem",
        })
    }
}

/// A snapshot's state: usable from `local_ready` on, `completed` once
/// replicated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SnapshotStatus {
    InProgress,
    LocalReady,
    Completed,
}

impl SnapshotStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "in_progress",
            Self::LocalReady => "local_ready",
            Self::Completed => "completed",
        }
    }

    pub(crate) fn usable(self) -> bool {
        self != Self::InProgress
    }
}

#[derive(Default)]
pub(crate) struct Inner {
    pub sandboxes: HashMap<String, Sandbox>,
    pub snapshots: HashMap<String, Snapshot>,
    /// The sandbox-image catalog (see `catalog`).
    pub catalog: Catalog,
}

/// Everything the handlers share.
pub(crate) struct Shared {
    pub config: MockConfig,
    pub url: String,
    pub inner: Mutex<Inner>,
    pub faults: Mutex<Vec<Fault>>,
    /// `(method, path)` of every authenticated request.
    pub log: Mutex<Vec<(String, String)>>,
    pub last_create: Mutex<Option<serde_json::Value>>,
    /// The body of every `POST /api/v1/processes`, as sent.
    pub process_starts: Mutex<Vec<serde_json::Value>>,
    /// What the next creates answer, first first.
    pub create_outcomes: Mutex<std::collections::VecDeque<CreateOutcome>>,
    /// How each PTY attach carried its token: `header` or `query`.
    pub pty_token_carriers: Mutex<Vec<&'static str>>,
    /// The `wait_ms` of every suspend and resume (`None` where absent).
    pub lifecycle_waits: Mutex<Vec<Option<u64>>>,
    /// The request-timeout grace each create asked for, in ms.
    pub create_graces: Mutex<Vec<Option<u64>>>,
}

impl Shared {
    pub(crate) fn new(config: MockConfig, url: String) -> Self {
        Self {
            config,
            url,
            inner: Mutex::new(Inner::default()),
            faults: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            last_create: Mutex::new(None),
            process_starts: Mutex::new(Vec::new()),
            create_outcomes: Mutex::new(std::collections::VecDeque::new()),
            pty_token_carriers: Mutex::new(Vec::new()),
            create_graces: Mutex::new(Vec::new()),
            lifecycle_waits: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("mock state")
    }

    /// A sandbox's state; `None` once deleted (even while `terminated`).
    pub(crate) fn status_of(&self, id: &str) -> Option<String> {
        self.lock()
            .sandboxes
            .get(id)
            .filter(|s| s.status != Status::Terminated)
            .map(|s| s.status.as_str().to_owned())
    }

    pub(crate) fn network_of(&self, id: &str) -> Option<serde_json::Value> {
        self.lock()
            .sandboxes
            .get(id)
            .and_then(|s| s.network.clone())
    }

    pub(crate) fn kill_everything(&self) {
        let inner = self.lock();
        for sandbox in inner.sandboxes.values() {
            sandbox.signal_all(nix::sys::signal::Signal::SIGKILL);
            sandbox.signal_all(nix::sys::signal::Signal::SIGCONT);
        }
    }
}

impl Inner {
    /// The sandbox an id or a name stands for, as the service resolves
    /// `/sandboxes/{id}` (a deleted one's name is free again).
    pub(crate) fn resolve(&self, key: &str) -> Option<&str> {
        if self.sandboxes.contains_key(key) {
            return Some(self.sandboxes.get_key_value(key)?.0);
        }
        self.sandboxes
            .values()
            .find(|s| s.name.as_deref() == Some(key) && s.status != Status::Terminated)
            .map(|s| s.id.as_str())
    }
}

/// Unix time in seconds, with fractions, as the service reports it.
pub(crate) fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A fresh id: lowercase hex.
pub(crate) fn new_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspend_and_resume_rules() {
        assert_eq!(
            on_suspend(Status::Running, true),
            Ok(Some(Status::Suspending))
        );
        assert_eq!(on_suspend(Status::Suspended, true), Ok(None));
        for mid in [Status::Pending, Status::Suspending, Status::Snapshotting] {
            assert_eq!(
                on_suspend(mid, true).unwrap_err().status,
                StatusCode::CONFLICT
            );
            assert_eq!(
                on_resume(mid, true).unwrap_err().status,
                StatusCode::CONFLICT
            );
        }
        assert_eq!(
            on_suspend(Status::Running, false).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            on_resume(Status::Suspended, true),
            Ok(Some(Status::Running))
        );
        assert_eq!(on_resume(Status::Running, true), Ok(None));
        assert!(on_snapshot(Status::Suspended).is_err());
    }

    #[test]
    fn names() {
        assert!(valid_name("garrison-0123abcd"));
        for bad in ["", "-a", "a-", "Abc", "a_b", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
