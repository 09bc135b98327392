//! The remote's state directory (`DEVIN_REMOTE_STATE_DIR`).
//!
//! The real `devin-remote` keeps credentials and shell integration there;
//! the simulator keeps what lets a test or an operator see what happened:
//! `state.json` (who, since when, how many connections) and `steps.log`
//! (one JSON line per step executed). The connect token is never written:
//! the directory may outlive the session, e.g. inside a snapshot.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

pub(crate) const STATE_FILE: &str = "state.json";
pub(crate) const STEPS_FILE: &str = "steps.log";

pub(crate) struct StateDir {
    dir: PathBuf,
    session_id: String,
    started_at: u64,
    connections: u64,
    steps: File,
}

impl StateDir {
    /// Creates the directory (mode 0700) and writes the initial state.
    pub(crate) fn open(dir: &Path, session_id: &str) -> io::Result<StateDir> {
        DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        // `mode` above only applies to directories we create; tighten one
        // that already existed too, since it may hold session data.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        // A restarted remote for the same session keeps counting, so the
        // count shows reconnects across process restarts.
        let connections = previous_connections(&dir.join(STATE_FILE), session_id);
        let steps = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(dir.join(STEPS_FILE))?;
        let state = StateDir {
            dir: dir.to_path_buf(),
            session_id: session_id.to_string(),
            started_at: unix_now(),
            connections,
            steps,
        };
        state.write()?;
        Ok(state)
    }

    pub(crate) fn record_connection(&mut self) -> io::Result<()> {
        self.connections += 1;
        self.write()
    }

    /// Appends one step as a JSON line, stamped with the time.
    pub(crate) fn record_step(&mut self, mut step: Value) -> io::Result<()> {
        if let Value::Object(fields) = &mut step {
            fields.insert("at".into(), json!(unix_now()));
        }
        let mut line = step.to_string();
        line.push('\n');
        // One write per line so concurrent readers never see half a step.
        self.steps.write_all(line.as_bytes())
    }

    fn write(&self) -> io::Result<()> {
        let state = json!({
            "session_id": self.session_id,
            "pid": std::process::id(),
            "started_at": self.started_at,
            "connections": self.connections,
            "version": crate::VERSION,
        });
        // Write then rename, so a reader never sees a torn file.
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(format!("{state:#}\n").as_bytes())?;
        drop(file);
        fs::rename(tmp, self.dir.join(STATE_FILE))
    }
}

fn previous_connections(path: &Path, session_id: &str) -> u64 {
    let Ok(text) = fs::read_to_string(path) else {
        return 0;
    };
    let Ok(old) = serde_json::from_str::<Value>(&text) else {
        return 0;
    };
    if old["session_id"] == session_id {
        old["connections"].as_u64().unwrap_or(0)
    } else {
        0
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "remote-sim-state-{name}-{}-{}",
            std::process::id(),
            unix_now()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn writes_state_and_steps_with_private_modes() {
        let dir = scratch("modes").join("nested");
        let mut state = StateDir::open(&dir, "devin-1").unwrap();
        state.record_connection().unwrap();
        state.record_step(json!({"step": "exec", "id": 1})).unwrap();

        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let saved: Value =
            serde_json::from_str(&fs::read_to_string(dir.join(STATE_FILE)).unwrap()).unwrap();
        assert_eq!(saved["session_id"], "devin-1");
        assert_eq!(saved["connections"], 1);
        let steps = fs::read_to_string(dir.join(STEPS_FILE)).unwrap();
        let line: Value = serde_json::from_str(steps.lines().next().unwrap()).unwrap();
        assert_eq!(line["step"], "exec");
        assert!(line["at"].is_u64());
        fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn connection_count_survives_restart_of_the_same_session() {
        let dir = scratch("restart");
        StateDir::open(&dir, "devin-1")
            .unwrap()
            .record_connection()
            .unwrap();
        let mut again = StateDir::open(&dir, "devin-1").unwrap();
        again.record_connection().unwrap();
        assert_eq!(again.connections, 2);
        let other = StateDir::open(&dir, "devin-2").unwrap();
        assert_eq!(other.connections, 0);
        fs::remove_dir_all(&dir).unwrap();
    }
}
