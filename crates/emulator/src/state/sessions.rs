//! The Devin sessions behind the queue rows: creating one, stopping and
//! resuming it, its status changes, and the transcript every transition
//! appends to.

use fleet::{EntrySpec, SessionKind, SessionStatus};
use serde_json::{Value, json};

use super::{State, StateError, random_hex};
use crate::model::{NewSession, Script, SessionView, TranscriptEvent};

/// How a session is being stopped; decided by the script's end or the admin
/// API, applied to `session_status` once the remote is gone (after the lag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Sleep,
    End,
}

impl Stop {
    pub(crate) fn final_status(self) -> SessionStatus {
        match self {
            Stop::Sleep => SessionStatus::Suspended,
            Stop::End => SessionStatus::Terminated,
        }
    }
}

/// The Devin session behind a queue row, and the brain's progress in it.
#[derive(Clone, Debug)]
pub(crate) struct SessionRec {
    pub session_id: String,
    pub outpost_id: String,
    pub status: SessionStatus,
    pub script: Script,
    pub next_step: usize,
    /// Crashes already delivered for the current `Crash` step.
    pub crashes: u32,
    pub connections: u32,
    pub connected: Option<u64>,
    pub stopping: Option<Stop>,
    /// A status change waiting out the lag, and when it is due.
    pub status_due: Option<(SessionStatus, i64)>,
    pub transcript: Vec<TranscriptEvent>,
}

impl SessionRec {
    pub(crate) fn record(&mut self, now: i64, kind: &str, detail: Value) {
        self.transcript.push(TranscriptEvent {
            at_ms: now,
            kind: kind.to_owned(),
            detail,
        });
    }
}

impl State {
    pub(crate) fn create_session(
        &mut self,
        req: NewSession,
        now: i64,
    ) -> Result<String, StateError> {
        let outpost = self
            .outpost_rec(&req.outpost_id)
            .cloned()
            .ok_or_else(|| StateError::NotFound("outpost".into()))?;
        let session_id = match req.session_id {
            Some(id) => {
                fleet::validate_session_id(&id).map_err(|e| StateError::Invalid(e.to_string()))?;
                id
            }
            None => format!("devin-{}", random_hex(16)),
        };
        if self.sessions.contains_key(&session_id) {
            return Err(StateError::Conflict("session already exists".into()));
        }
        let spec = EntrySpec {
            kind: req.kind.unwrap_or(SessionKind::New),
            platform: req.platform.unwrap_or(outpost.platform),
            remote_binary_sha: req.remote_binary_sha,
            network_policy: req.network_policy.unwrap_or_default(),
        };
        let mut session = SessionRec {
            session_id: session_id.clone(),
            outpost_id: outpost.id.clone(),
            status: SessionStatus::Pending,
            script: req.script,
            next_step: 0,
            crashes: 0,
            connections: 0,
            connected: None,
            stopping: None,
            status_due: None,
            transcript: Vec::new(),
        };
        session.record(now, "enqueued", json!({"kind": spec.kind.as_str()}));
        self.sessions.insert(session_id.clone(), session);
        self.enqueue(&session_id, &outpost.id, spec, now);
        Ok(session_id)
    }

    pub(crate) fn view(&self, session_id: &str) -> Option<SessionView> {
        let s = self.sessions.get(session_id)?;
        Some(SessionView {
            session_id: s.session_id.clone(),
            outpost_id: s.outpost_id.clone(),
            entry: self.render(session_id),
            session_status: s.status.clone(),
            connections: s.connections,
            connected: s.connected.is_some(),
            steps_done: s.next_step,
            transcript: s.transcript.clone(),
        })
    }

    fn session_mut(&mut self, session_id: &str) -> Result<&mut SessionRec, StateError> {
        self.sessions
            .get_mut(session_id)
            .ok_or_else(|| StateError::NotFound("session".into()))
    }

    /// Asks the session to stop. With a remote connected the brain tells it
    /// and the status follows its exit; without one the status just follows
    /// after the lag. Returns whether a connected brain must be woken.
    pub(crate) fn request_stop(
        &mut self,
        session_id: &str,
        stop: Stop,
        now: i64,
    ) -> Result<bool, StateError> {
        let lag = self.timing.status_lag_ms;
        let s = self.session_mut(session_id)?;
        if s.status == SessionStatus::Terminated {
            if stop == Stop::End {
                return Ok(false);
            }
            return Err(StateError::Conflict("session is terminated".into()));
        }
        if stop == Stop::Sleep && s.status == SessionStatus::Suspended {
            return Ok(false);
        }
        s.stopping = Some(stop);
        s.record(
            now,
            "stop_requested",
            json!({"stop": format!("{stop:?}").to_lowercase()}),
        );
        if s.connected.is_some() {
            return Ok(true);
        }
        s.status_due = Some((stop.final_status(), now + lag));
        Ok(false)
    }

    /// Queues a suspended session again as a `resume` entry with a new script.
    pub(crate) fn resume(
        &mut self,
        session_id: &str,
        script: Script,
        now: i64,
    ) -> Result<(), StateError> {
        let s = self.session_mut(session_id)?;
        if s.status != SessionStatus::Suspended {
            return Err(StateError::Conflict(format!(
                "session is {}, not suspended",
                s.status
            )));
        }
        s.status = SessionStatus::Pending;
        s.script = script;
        s.next_step = 0;
        s.crashes = 0;
        s.stopping = None;
        s.status_due = None;
        s.record(now, "resumed", json!({}));
        let outpost_id = s.outpost_id.clone();
        let mut spec = self
            .entries
            .get(session_id)
            .map(|e| e.spec.clone())
            .unwrap_or_default();
        if !self.entries.contains_key(session_id) {
            let platform = self
                .outpost_rec(&outpost_id)
                .map(|o| o.platform.clone())
                .unwrap_or_default();
            spec.platform = platform;
        }
        spec.kind = SessionKind::Resume;
        self.enqueue(session_id, &outpost_id, spec, now);
        Ok(())
    }

    pub(crate) fn set_status(&mut self, session_id: &str, status: SessionStatus, now: i64) {
        let Some(s) = self.sessions.get_mut(session_id) else {
            return;
        };
        if s.status == status {
            return;
        }
        let from = std::mem::replace(&mut s.status, status.clone());
        s.record(
            now,
            "status",
            json!({"from": from.as_str(), "to": status.as_str()}),
        );
        self.touch(session_id, now);
        self.emit_modified(session_id);
    }

    pub(super) fn record(&mut self, session_id: &str, now: i64, kind: &str, detail: Value) {
        if let Some(s) = self.sessions.get_mut(session_id) {
            s.record(now, kind, detail);
        }
    }

    pub(crate) fn record_event(&mut self, session_id: &str, kind: &str, detail: Value, now: i64) {
        self.record(session_id, now, kind, detail);
    }
}
