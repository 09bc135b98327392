//! Per-session logs under the state directory.
//!
//! `sessions/<hashed id>/remote.log` holds the remote's output (copied out of
//! the sandbox, so it outlives it and reads the same for every backend) and
//! `events.log` Garrison's own events for the session, one JSON object a
//! line. Every line passes through the [`Redactor`] first. Files are 0600 in
//! a 0700 directory. The directory is named after a hash of the session id,
//! never the id itself.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::Arc;

use crate::redact::Redactor;

/// The remote's output.
pub const REMOTE_LOG: &str = "remote.log";
/// The session's events.
pub(crate) const EVENTS_LOG: &str = "events.log";

#[derive(Clone)]
/// Each session's log directory: events and the remote's output.
pub(crate) struct SessionLogs {
    root: PathBuf,
    redactor: Arc<Redactor>,
}

impl SessionLogs {
    /// Logs under `root`, scrubbed by `redactor`.
    pub(crate) fn new(root: PathBuf, redactor: Arc<Redactor>) -> std::io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        Ok(Self { root, redactor })
    }

    /// The secrets kept out of the logs.
    pub(crate) fn redactor(&self) -> &Arc<Redactor> {
        &self.redactor
    }

    /// The session's log directory.
    pub(crate) fn dir(&self, session_id: &str) -> PathBuf {
        self.root.join(sandbox::hashed_id(session_id))
    }

    fn append(&self, session_id: &str, file: &str, bytes: &[u8]) -> std::io::Result<()> {
        let dir = self.dir(session_id);
        if !dir.exists() {
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.join(file))?;
        let before = f.metadata()?.len();
        if let Err(e) = f.write_all(bytes) {
            // A full disk can take part of it: cut that off, so the next
            // try (the same output again) leaves no piece twice.
            let _ = f.set_len(before);
            return Err(e);
        }
        Ok(())
    }

    /// Bytes in the session's copy of the remote's output (0 before any):
    /// what counts against the session's log cap, across restarts and
    /// resumes of the remote and of Garrison.
    pub(crate) fn remote_output_len(&self, session_id: &str) -> u64 {
        std::fs::metadata(self.dir(session_id).join(REMOTE_LOG)).map_or(0, |m| m.len())
    }

    /// Appends output of the remote.
    pub(crate) fn remote_output(&self, session_id: &str, bytes: &[u8]) -> std::io::Result<()> {
        let text = self.redactor.scrub(&String::from_utf8_lossy(bytes));
        self.append(session_id, REMOTE_LOG, text.as_bytes())
    }

    /// Appends one event line.
    pub(crate) fn event(
        &self,
        session_id: &str,
        at_ms: i64,
        kind: &str,
        detail: &serde_json::Value,
    ) -> std::io::Result<()> {
        let detail = crate::store::bound::detail(detail);
        let line = serde_json::json!({ "at": at_ms, "kind": kind, "detail": detail }).to_string();
        let mut line = self.redactor.scrub(&line);
        line.push('\n');
        self.append(session_id, EVENTS_LOG, line.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Reads the last `lines` lines of a log file.
    fn tail(path: &Path, lines: usize) -> std::io::Result<String> {
        let text = std::fs::read_to_string(path)?;
        let all: Vec<&str> = text.lines().collect();
        let start = all.len().saturating_sub(lines);
        Ok(all[start..].join("\n"))
    }

    #[test]
    fn logs_are_private_redacted_and_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let redactor = Arc::new(Redactor::default());
        redactor.add("connect-token-abc");
        let logs = SessionLogs::new(dir.path().join("sessions"), redactor).unwrap();
        logs.remote_output("../../etc", b"token connect-token-abc here\n")
            .unwrap();
        logs.event(
            "../../etc",
            1,
            "claimed",
            &serde_json::json!({"t": "connect-token-abc"}),
        )
        .unwrap();
        let session_dir = logs.dir("../../etc");
        assert!(session_dir.starts_with(dir.path().join("sessions")));
        let remote = std::fs::read_to_string(session_dir.join(REMOTE_LOG)).unwrap();
        assert_eq!(remote, "token [redacted] here\n");
        let events = std::fs::read_to_string(session_dir.join(EVENTS_LOG)).unwrap();
        assert!(!events.contains("connect-token-abc"));
        let mode = std::fs::metadata(session_dir.join(REMOTE_LOG))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            tail(&session_dir.join(REMOTE_LOG), 5).unwrap(),
            "token [redacted] here"
        );
    }
}
