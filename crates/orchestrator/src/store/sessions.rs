//! Session records: what the executor writes down before and after each
//! step of a session, read back to re-adopt after a restart and to count
//! sessions by stage for status.

use anyhow::Result;
use fleet::{SessionId, SessionKind};
use rusqlite::{OptionalExtension, params};
use sandbox::{Handle, ProcessRef};
use serde::{Deserialize, Serialize};

use super::db::{Store, is_bad_session_id, json, opt_json, parse, parse_opt, session_id};
use crate::planner::{Millis, Stage};

/// One held (or once held) session, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session.
    pub session_id: SessionId,
    /// Its outpost.
    pub outpost_id: String,
    /// The entry's kind when claimed (stored as its wire spelling).
    pub kind: SessionKind,
    /// The backend it runs on.
    pub backend: String,
    /// Where it is.
    pub stage: Stage,
    /// The claim's deadline, for display.
    pub claim_deadline: Option<Millis>,
    /// The remote build.
    pub remote_sha: Option<String>,
    /// Its sandbox.
    pub handle: Option<Handle>,
    /// The current remote process, recorded before it is spawned.
    pub process: Option<ProcessRef>,
    /// Restarts of its remote.
    pub restarts: u32,
    /// Failed starts.
    pub start_failures: u32,
    /// How much of the remote's output is already in the session log.
    pub output_offset: u64,
    /// The last error.
    pub error: Option<String>,
    /// When it was claimed.
    pub claimed_at: Millis,
    /// When its remote first ran.
    pub running_at: Option<Millis>,
    /// When the record last changed.
    pub updated_at: Millis,
}

impl SessionRecord {
    /// The record of a session just claimed.
    pub fn new(
        session_id: &SessionId,
        outpost_id: &str,
        kind: SessionKind,
        backend: &str,
        now: Millis,
    ) -> Self {
        Self {
            session_id: session_id.clone(),
            outpost_id: outpost_id.to_owned(),
            kind,
            backend: backend.to_owned(),
            stage: Stage::Claimed,
            claim_deadline: None,
            remote_sha: None,
            handle: None,
            process: None,
            restarts: 0,
            start_failures: 0,
            output_offset: 0,
            error: None,
            claimed_at: now,
            running_at: None,
            updated_at: now,
        }
    }
}

const SESSION_COLUMNS: &str = "session_id, outpost_id, kind, backend, stage, claim_deadline, remote_sha, handle, \
     process, restarts, start_failures, output_offset, error, claimed_at, running_at, updated_at";

fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRecord> {
    Ok(SessionRecord {
        session_id: session_id("sessions", row.get(0)?)?,
        outpost_id: row.get(1)?,
        kind: SessionKind::from(row.get::<_, String>(2)?.as_str()),
        backend: row.get(3)?,
        stage: parse(&row.get::<_, String>(4)?)?,
        claim_deadline: row.get(5)?,
        remote_sha: row.get(6)?,
        handle: parse_opt(row.get(7)?)?,
        process: parse_opt(row.get(8)?)?,
        restarts: row.get(9)?,
        start_failures: row.get(10)?,
        output_offset: row.get::<_, i64>(11)? as u64,
        error: row.get(12)?,
        claimed_at: row.get(13)?,
        running_at: row.get(14)?,
        updated_at: row.get(15)?,
    })
}

impl Store {
    /// Inserts or replaces a session record.
    pub fn put_session(&self, record: &SessionRecord) -> Result<()> {
        let stage = json(&record.stage)?;
        let handle = opt_json(&record.handle)?;
        let process = opt_json(&record.process)?;
        let error = record.error.as_deref().map(super::bound::error_text);
        // Cached: a thousand sessions write their records many times a
        // minute, and parsing the statement each time was most of the cost.
        self.write(|c| {
            c.prepare_cached(
                &format!("INSERT OR REPLACE INTO sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"),
            )?
            .execute(
                params![
                    record.session_id.as_str(),
                    record.outpost_id,
                    record.kind.as_str(),
                    record.backend,
                    stage,
                    record.claim_deadline,
                    record.remote_sha,
                    handle,
                    process,
                    record.restarts,
                    record.start_failures,
                    record.output_offset as i64,
                    error,
                    record.claimed_at,
                    record.running_at,
                    record.updated_at,
                ],
            )
            .map(drop)
        })
    }

    /// The session's record, if any.
    pub fn session(&self, session_id: &SessionId) -> Result<Option<SessionRecord>> {
        self.with(|c| {
            c.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?1"
            ))?
            .query_row([session_id.as_str()], session_from_row)
            .optional()
        })
    }

    /// Every recorded session, newest claim first.
    pub fn sessions(&self) -> Result<Vec<SessionRecord>> {
        self.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY claimed_at DESC"
            ))?;
            let mut sessions = Vec::new();
            for row in stmt.query_map([], session_from_row)? {
                match row {
                    Ok(session) => sessions.push(session),
                    // One row no server could have written (a hand-edited
                    // database) must not keep every other session from
                    // being re-adopted or listed.
                    Err(e) if is_bad_session_id(&e) => {
                        tracing::error!(error = %e, "skipping a session the state store cannot hold")
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(sessions)
        })
    }

    /// Sessions of an outpost that are not done: the ones to re-adopt.
    pub fn active_sessions(&self, outpost_id: &str) -> Result<Vec<SessionRecord>> {
        Ok(self
            .sessions()?
            .into_iter()
            .filter(|s| s.outpost_id == outpost_id && !s.stage.is_done())
            .collect())
    }

    /// Sessions finished this way, for status counts.
    pub fn count_by_stage(&self) -> Result<Vec<(String, u64)>> {
        let mut counts = std::collections::BTreeMap::<String, u64>::new();
        for s in self.sessions()? {
            *counts
                .entry(s.stage.label().as_str().to_owned())
                .or_default() += 1;
        }
        Ok(counts.into_iter().collect())
    }
}

/// A stage's short name: `stage.label().as_str()` (see
/// [`crate::planner::StageLabel`]), kept at this path for its callers.
pub fn stage_label(stage: &Stage) -> &'static str {
    stage.label().as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::Finish;

    #[test]
    fn sessions_round_trip_with_handle_and_process() {
        let store = Store::in_memory().unwrap();
        let id = SessionId::new("devin-1").unwrap();
        let mut rec = SessionRecord::new(&id, "o", SessionKind::New, "host", 10);
        rec.stage = Stage::Running;
        rec.claim_deadline = Some(300_000);
        rec.handle = Some(Handle {
            backend: "host".into(),
            id: "garrison-x".into(),
            name: "garrison-x".into(),
            labels: Default::default(),
            workdir: "/w".into(),
            state_dir: "/s".into(),
            bin_dir: "/b".into(),
            home: "/h".into(),
            image: None,
        });
        rec.process = Some(ProcessRef {
            id: "remote-1".into(),
        });
        store.put_session(&rec).unwrap();
        assert_eq!(store.session(&id).unwrap(), Some(rec.clone()));
        assert_eq!(store.active_sessions("o").unwrap().len(), 1);
        rec.stage = Stage::Done(Finish::Terminated);
        store.put_session(&rec).unwrap();
        assert!(store.active_sessions("o").unwrap().is_empty());
        assert_eq!(
            store.count_by_stage().unwrap(),
            vec![("terminated".to_owned(), 1)]
        );
    }

    #[test]
    fn a_stored_id_no_server_could_send_is_skipped_and_named_the_rest_load() {
        let store = Store::in_memory().unwrap();
        for id in ["devin-1", "devin-2"] {
            let id = SessionId::new(id).unwrap();
            store
                .put_session(&SessionRecord::new(&id, "o", SessionKind::New, "host", 10))
                .unwrap();
        }
        store
            .write(|c| {
                c.execute(
                    "UPDATE sessions SET session_id = 'a\nb' WHERE session_id = 'devin-1'",
                    [],
                )
            })
            .unwrap();
        let left: Vec<_> = store
            .sessions()
            .unwrap()
            .into_iter()
            .map(|s| s.session_id.to_string())
            .collect();
        assert_eq!(left, ["devin-2"]);
        assert_eq!(store.active_sessions("o").unwrap().len(), 1);
        // What the log says of the skipped row names it.
        let e = store
            .with(|c| {
                c.query_row(
                    &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = 'a\nb'"),
                    [],
                    session_from_row,
                )
            })
            .unwrap_err();
        let message = format!("{e:#}");
        assert!(
            message.contains("the sessions row of session \"a\\nb\""),
            "{message}"
        );
        assert!(message.contains("control character"), "{message}");
    }
}
