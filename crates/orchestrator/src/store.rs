//! Durable state in SQLite: the acceptor id, watch cursors, and per session
//! its claim, sandbox, remote process, snapshots and event history.
//!
//! The executor writes a step down before it starts it and again when it
//! ends, so a restarted Garrison knows exactly where each session was. The
//! connect token is never stored: after a restart the claim is renewed for a
//! fresh one. The database file is created with mode 0600.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, params};
use sandbox::{Handle, ProcessRef, SnapshotRef};
use serde::{Deserialize, Serialize};

use fleet::SessionKind;

use crate::planner::{Millis, Stage};

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cursors (
    outpost_id TEXT PRIMARY KEY,
    cursor     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    session_id      TEXT PRIMARY KEY,
    outpost_id      TEXT NOT NULL,
    kind            TEXT NOT NULL,
    backend         TEXT NOT NULL,
    stage           TEXT NOT NULL,
    claim_deadline  INTEGER,
    remote_sha      TEXT,
    handle          TEXT,
    process         TEXT,
    restarts        INTEGER NOT NULL DEFAULT 0,
    start_failures  INTEGER NOT NULL DEFAULT 0,
    output_offset   INTEGER NOT NULL DEFAULT 0,
    error           TEXT,
    claimed_at      INTEGER NOT NULL,
    running_at      INTEGER,
    updated_at      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshots (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL,
    reason      TEXT NOT NULL,
    snapshot    TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS snapshots_by_session ON snapshots(session_id);
CREATE TABLE IF NOT EXISTS events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    at          INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_session ON events(session_id, id);
"#;

/// One held (or once held) session, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub session_id: String,
    pub outpost_id: String,
    /// The entry's kind when claimed (stored as its wire spelling).
    pub kind: SessionKind,
    pub backend: String,
    pub stage: Stage,
    pub claim_deadline: Option<Millis>,
    pub remote_sha: Option<String>,
    pub handle: Option<Handle>,
    /// The current remote process, recorded before it is spawned.
    pub process: Option<ProcessRef>,
    pub restarts: u32,
    pub start_failures: u32,
    /// How much of the remote's output is already in the session log.
    pub output_offset: u64,
    pub error: Option<String>,
    pub claimed_at: Millis,
    pub running_at: Option<Millis>,
    pub updated_at: Millis,
}

impl SessionRecord {
    pub fn new(
        session_id: &str,
        outpost_id: &str,
        kind: SessionKind,
        backend: &str,
        now: Millis,
    ) -> Self {
        Self {
            session_id: session_id.to_owned(),
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

/// Why a snapshot was kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotReason {
    Suspend,
    Recovery,
    /// Kept at the operator's request (`garrison terminate --keep-snapshot`).
    Operator,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredSnapshot {
    pub session_id: String,
    pub reason: SnapshotReason,
    pub snapshot: SnapshotRef,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: i64,
    pub session_id: String,
    pub at: Millis,
    pub kind: String,
    pub detail: serde_json::Value,
}

pub struct Store {
    conn: Mutex<Connection>,
}

fn json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).context("encoding a state value")
}

fn opt_json<T: Serialize>(value: &Option<T>) -> Result<Option<String>> {
    value.as_ref().map(json).transpose()
}

fn parse<T: for<'de> Deserialize<'de>>(text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn parse_opt<T: for<'de> Deserialize<'de>>(text: Option<String>) -> rusqlite::Result<Option<T>> {
    text.as_deref().map(parse).transpose()
}

const SESSION_COLUMNS: &str = "session_id, outpost_id, kind, backend, stage, claim_deadline, remote_sha, handle, \
     process, restarts, start_failures, output_offset, error, claimed_at, running_at, updated_at";

fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRecord> {
    Ok(SessionRecord {
        session_id: row.get(0)?,
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
    /// Opens (creating) the database at `path`, mode 0600.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let conn = Connection::open(path)
            .with_context(|| format!("opening state store {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", path.display()))?;
        Self::init(conn)
    }

    /// Opens an existing database for reading beside a running daemon (the
    /// `garrison status`-like commands): never creates the file, never
    /// changes its mode or schema.
    pub fn open_existing(path: &Path) -> Result<Self> {
        use rusqlite::OpenFlags;
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
        .with_context(|| format!("opening state store {}", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    pub fn in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self> {
        // WAL survives a kill -9 at any point and lets readers (status
        // commands) run beside the daemon.
        // The busy timeout first: switching to WAL needs a lock that a
        // status command reading beside the daemon may briefly hold.
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)
            .context("creating the state schema")?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&conn).context("state store")
    }

    /// Makes every later write fail as on a read-only database (reads still
    /// work), for tests of what a failed record stops.
    #[cfg(test)]
    pub(crate) fn fail_writes(&self) {
        self.with(|c| c.pragma_update(None, "query_only", true))
            .expect("setting query_only");
    }

    /// The acceptor id, generated once and stable across restarts.
    pub fn acceptor_id(&self, generate: impl FnOnce() -> String) -> Result<String> {
        self.with(|c| {
            if let Some(id) = c
                .query_row(
                    "SELECT value FROM meta WHERE key = 'acceptor_id'",
                    [],
                    |r| r.get(0),
                )
                .optional()?
            {
                return Ok(id);
            }
            let id = generate();
            c.execute(
                "INSERT INTO meta (key, value) VALUES ('acceptor_id', ?1)",
                [&id],
            )?;
            Ok(id)
        })
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .map(drop)
        })
    }

    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.with(|c| {
            c.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                .optional()
        })
    }

    pub fn save_cursor(&self, outpost_id: &str, cursor: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "INSERT INTO cursors (outpost_id, cursor) VALUES (?1, ?2)
                 ON CONFLICT(outpost_id) DO UPDATE SET cursor = excluded.cursor",
                params![outpost_id, cursor],
            )
            .map(drop)
        })
    }

    pub fn cursor(&self, outpost_id: &str) -> Result<Option<String>> {
        self.with(|c| {
            c.query_row(
                "SELECT cursor FROM cursors WHERE outpost_id = ?1",
                [outpost_id],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// Inserts or replaces a session record.
    pub fn put_session(&self, record: &SessionRecord) -> Result<()> {
        let stage = json(&record.stage)?;
        let handle = opt_json(&record.handle)?;
        let process = opt_json(&record.process)?;
        self.with(|c| {
            c.execute(
                &format!("INSERT OR REPLACE INTO sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"),
                params![
                    record.session_id,
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
                    record.error,
                    record.claimed_at,
                    record.running_at,
                    record.updated_at,
                ],
            )
            .map(drop)
        })
    }

    pub fn session(&self, session_id: &str) -> Result<Option<SessionRecord>> {
        self.with(|c| {
            c.query_row(
                &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?1"),
                [session_id],
                session_from_row,
            )
            .optional()
        })
    }

    /// Every recorded session, newest claim first.
    pub fn sessions(&self) -> Result<Vec<SessionRecord>> {
        self.with(|c| {
            let mut stmt = c.prepare(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY claimed_at DESC"
            ))?;
            stmt.query_map([], session_from_row)?.collect()
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

    pub fn add_snapshot(&self, stored: &StoredSnapshot) -> Result<()> {
        let snapshot = json(&stored.snapshot)?;
        let reason = json(&stored.reason)?;
        self.with(|c| {
            c.execute(
                "INSERT OR REPLACE INTO snapshots (id, session_id, reason, snapshot, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![stored.snapshot.id, stored.session_id, reason, snapshot, stored.snapshot.created_at_ms],
            )
            .map(drop)
        })
    }

    fn query_snapshots(
        &self,
        sql: &str,
        param: &dyn rusqlite::ToSql,
    ) -> Result<Vec<StoredSnapshot>> {
        self.with(|c| {
            let mut stmt = c.prepare(sql)?;
            stmt.query_map([param], |row| {
                Ok(StoredSnapshot {
                    session_id: row.get(0)?,
                    reason: parse(&row.get::<_, String>(1)?)?,
                    snapshot: parse(&row.get::<_, String>(2)?)?,
                })
            })?
            .collect()
        })
    }

    /// A session's snapshots, oldest first.
    pub fn snapshots(&self, session_id: &str) -> Result<Vec<StoredSnapshot>> {
        self.query_snapshots(
            "SELECT session_id, reason, snapshot FROM snapshots WHERE session_id = ?1 ORDER BY created_at",
            &session_id,
        )
    }

    /// Snapshots created before `cutoff`, for the retention sweep.
    pub fn snapshots_older_than(&self, cutoff: Millis) -> Result<Vec<StoredSnapshot>> {
        self.query_snapshots(
            "SELECT session_id, reason, snapshot FROM snapshots WHERE created_at < ?1 ORDER BY created_at",
            &cutoff,
        )
    }

    pub fn remove_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.with(|c| {
            c.execute("DELETE FROM snapshots WHERE id = ?1", [snapshot_id])
                .map(drop)
        })
    }

    pub fn add_event(
        &self,
        session_id: &str,
        at: Millis,
        kind: &str,
        detail: &serde_json::Value,
    ) -> Result<i64> {
        let detail = json(detail)?;
        self.with(|c| {
            c.execute(
                "INSERT INTO events (session_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)",
                params![session_id, at, kind, detail],
            )?;
            Ok(c.last_insert_rowid())
        })
    }

    /// A session's events after `after_id`, oldest first.
    pub fn events(&self, session_id: &str, after_id: i64) -> Result<Vec<Event>> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT id, session_id, at, kind, detail FROM events WHERE session_id = ?1 AND id > ?2 ORDER BY id",
            )?;
            stmt.query_map(params![session_id, after_id], |row| {
                Ok(Event {
                    id: row.get(0)?,
                    session_id: row.get(1)?,
                    at: row.get(2)?,
                    kind: row.get(3)?,
                    detail: parse(&row.get::<_, String>(4)?)?,
                })
            })?
            .collect()
        })
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
    fn acceptor_id_is_generated_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garrison.db");
        let first = Store::open(&path)
            .unwrap()
            .acceptor_id(|| "a-1".into())
            .unwrap();
        let again = Store::open(&path)
            .unwrap()
            .acceptor_id(|| "a-2".into())
            .unwrap();
        assert_eq!(first, "a-1");
        assert_eq!(again, "a-1");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn sessions_round_trip_with_handle_and_process() {
        let store = Store::in_memory().unwrap();
        let mut rec = SessionRecord::new("devin-1", "o", SessionKind::New, "host", 10);
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
        assert_eq!(store.session("devin-1").unwrap(), Some(rec.clone()));
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
    fn snapshots_and_events() {
        let store = Store::in_memory().unwrap();
        let snap = |id: &str, at: i64| StoredSnapshot {
            session_id: "s".into(),
            reason: SnapshotReason::Suspend,
            snapshot: SnapshotRef {
                backend: "host".into(),
                id: id.into(),
                size_bytes: 1,
                created_at_ms: at,
                base_image: None,
            },
        };
        store.add_snapshot(&snap("old", 1)).unwrap();
        store.add_snapshot(&snap("new", 5)).unwrap();
        assert_eq!(store.snapshots("s").unwrap().len(), 2);
        assert_eq!(store.snapshots_older_than(3).unwrap(), vec![snap("old", 1)]);
        store.remove_snapshot("old").unwrap();
        assert_eq!(store.snapshots("s").unwrap(), vec![snap("new", 5)]);

        let first = store
            .add_event("s", 1, "claimed", &serde_json::json!({"a": 1}))
            .unwrap();
        store
            .add_event("s", 2, "started", &serde_json::json!({}))
            .unwrap();
        let after = store.events("s", first).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].kind, "started");
    }

    #[test]
    fn an_existing_store_opens_for_reading_and_a_missing_one_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garrison.db");
        assert!(Store::open_existing(&path).is_err());
        assert!(!path.exists());
        let store = Store::open(&path).unwrap();
        store
            .put_session(&SessionRecord::new("s", "o", SessionKind::New, "host", 1))
            .unwrap();
        let reader = Store::open_existing(&path).unwrap();
        assert_eq!(reader.sessions().unwrap().len(), 1);
    }

    #[test]
    fn cursors_upsert() {
        let store = Store::in_memory().unwrap();
        assert_eq!(store.cursor("o").unwrap(), None);
        store.save_cursor("o", "c1").unwrap();
        store.save_cursor("o", "c2").unwrap();
        assert_eq!(store.cursor("o").unwrap().as_deref(), Some("c2"));
    }
}
