//! The mock's state and the pure rules of the sandbox state machine.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::http::StatusCode;

use crate::host::Proc;
use crate::pty::PtySession;
use crate::{Fault, MockConfig};

/// A sandbox's lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pending,
    Running,
    Snapshotting,
    Suspending,
    Suspended,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Snapshotting => "snapshotting",
            Self::Suspending => "suspending",
            Self::Suspended => "suspended",
        }
    }
}

/// Why a lifecycle request is refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
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
pub fn on_suspend(status: Status, named: bool) -> Result<Option<Status>, Refusal> {
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
pub fn on_resume(status: Status, named: bool) -> Result<Option<Status>, Refusal> {
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
pub fn on_snapshot(status: Status) -> Result<Status, Refusal> {
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
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

pub struct Sandbox {
    pub id: String,
    pub name: Option<String>,
    pub status: Status,
    pub image: Option<String>,
    pub resources: serde_json::Value,
    pub timeout_secs: u64,
    pub network: Option<serde_json::Value>,
    pub auto_resume: bool,
    pub dir: PathBuf,
    pub processes: Vec<Arc<Proc>>,
    pub ptys: HashMap<String, Arc<PtySession>>,
    pub last_activity: Instant,
    pub next_pid: i64,
}

impl Sandbox {
    pub fn info(&self, url: &str) -> serde_json::Value {
        serde_json::json!({
            "sandbox_id": self.id,
            "namespace": "default",
            "name": self.name,
            "status": self.status.as_str(),
            "image": self.image,
            "resources": self.resources,
            "timeout_secs": self.timeout_secs,
            "network": self.network,
            "sandbox_url": url,
        })
    }

    /// Every process group the sandbox runs (processes and PTYs).
    pub fn groups(&self) -> Vec<i32> {
        self.processes
            .iter()
            .map(|p| p.pid as i32)
            .chain(self.ptys.values().map(|p| p.pid))
            .collect()
    }
}

pub struct Snapshot {
    pub id: String,
    pub sandbox_id: String,
    pub completed: bool,
    pub archive: PathBuf,
    pub size: u64,
    pub base_image: Option<String>,
}

impl Snapshot {
    pub fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "snapshot_id": self.id,
            "namespace": "default",
            "sandbox_id": self.sandbox_id,
            "status": if self.completed { "completed" } else { "in_progress" },
            "size_bytes": self.size,
            "base_image": self.base_image,
            "snapshot_type": "filesystem",
        })
    }
}

#[derive(Default)]
pub struct Inner {
    pub sandboxes: HashMap<String, Sandbox>,
    pub snapshots: HashMap<String, Snapshot>,
    /// The sandbox-image catalog (see `catalog`).
    pub catalog: crate::catalog::Catalog,
}

/// Everything the handlers share.
pub struct Shared {
    pub config: MockConfig,
    pub url: String,
    pub inner: Mutex<Inner>,
    pub faults: Mutex<Vec<Fault>>,
    pub log: Mutex<Vec<String>>,
    pub last_create: Mutex<Option<serde_json::Value>>,
    /// The body of every `POST /api/v1/processes`, as sent.
    pub process_starts: Mutex<Vec<serde_json::Value>>,
}

impl Shared {
    pub fn new(config: MockConfig, url: String) -> Self {
        Self {
            config,
            url,
            inner: Mutex::new(Inner::default()),
            faults: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            last_create: Mutex::new(None),
            process_starts: Mutex::new(Vec::new()),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("mock state")
    }

    pub fn status_of(&self, id: &str) -> Option<String> {
        self.lock()
            .sandboxes
            .get(id)
            .map(|s| s.status.as_str().to_owned())
    }

    pub fn network_of(&self, id: &str) -> Option<serde_json::Value> {
        self.lock()
            .sandboxes
            .get(id)
            .and_then(|s| s.network.clone())
    }

    pub fn kill_everything(&self) {
        let inner = self.lock();
        for sandbox in inner.sandboxes.values() {
            for group in sandbox.groups() {
                crate::host::kill_group(group, nix::sys::signal::Signal::SIGKILL);
                crate::host::kill_group(group, nix::sys::signal::Signal::SIGCONT);
            }
        }
    }
}

/// A fresh id: lowercase hex.
pub fn new_id() -> String {
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
