//! The database itself: the connection (with the background checkpoint and
//! the schema's migrations), the small keyed tables (meta, cursors), and
//! the JSON helpers the record tables use.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{Context, Result};
use fleet::SessionId;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::schema::{self, MIGRATIONS, Migration};

/// Garrison's state: sessions, their history, cursors.
pub struct Store {
    conn: Mutex<Connection>,
    /// Statements that changed the database, since it was opened here.
    writes: AtomicU64,
    /// The last write failed for want of space (see [`is_out_of_space`]).
    out_of_space: AtomicBool,
    /// Writes fail as on a full disk (see `fill_disk`).
    #[cfg(test)]
    simulate_full: AtomicBool,
    /// Checkpoints the log off the writers' threads (a database file
    /// opened by the daemon only).
    _checkpointer: Option<super::checkpoint::Checkpointer>,
}

pub(super) fn json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).context("encoding a state value")
}

pub(super) fn opt_json<T: Serialize>(value: &Option<T>) -> Result<Option<String>> {
    value.as_ref().map(json).transpose()
}

pub(super) fn parse<T: for<'de> Deserialize<'de>>(text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// A session id read from `table`: checked as the fleet API's are, so a
/// row no server could have sent is an error naming that row.
pub(super) fn session_id(table: &'static str, raw: String) -> rusqlite::Result<SessionId> {
    SessionId::new(raw.clone()).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            Box::new(BadSessionId { table, raw, e }),
        )
    })
}

/// Whether reading a row failed only because its session id fails
/// [`SessionId::new`] (see [`session_id`]).
pub(super) fn is_bad_session_id(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::FromSqlConversionFailure(_, _, inner) if inner.is::<BadSessionId>())
}

/// A stored session id that fails [`SessionId::new`].
#[derive(Debug, thiserror::Error)]
#[error("the {table} row of session {raw:?}: {e}")]
struct BadSessionId {
    table: &'static str,
    raw: String,
    e: fleet::InvalidEntry,
}

/// Whether `e` (from the state store, a session log or any file under the
/// state directory) says the disk is full: SQLite's `SQLITE_FULL`, or
/// `ENOSPC`/`EDQUOT` from the file system.
pub(crate) fn is_out_of_space(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<rusqlite::Error>() {
            return e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull);
        }
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(io_out_of_space)
    })
}

/// Whether a file system call failed for want of space (or of quota).
pub(crate) fn io_out_of_space(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::ENOSPC | Errno::EDQUOT)
    )
}

pub(super) fn parse_opt<T: for<'de> Deserialize<'de>>(
    text: Option<String>,
) -> rusqlite::Result<Option<T>> {
    text.as_deref().map(parse).transpose()
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
        // Before anything is written: a store of a newer release is left
        // exactly as it is.
        schema::refuse_newer(&conn, MIGRATIONS)
            .with_context(|| format!("opening state store {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", path.display()))?;
        let mut store = Self::init(conn, MIGRATIONS)
            .with_context(|| format!("opening state store {}", path.display()))?;
        match super::checkpoint::Checkpointer::start(path) {
            Ok(checkpointer) => {
                store.with(|c| c.pragma_update(None, "wal_autocheckpoint", 0))?;
                store._checkpointer = Some(checkpointer);
            }
            // SQLite's own checkpoints stay on: slower, never unbounded.
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "checkpointing the state store in the background")
            }
        }
        Ok(store)
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
        schema::refuse_newer(&conn, MIGRATIONS)
            .with_context(|| format!("opening state store {}", path.display()))?;
        Ok(Self {
            conn: Mutex::new(conn),
            writes: AtomicU64::new(0),
            out_of_space: AtomicBool::new(false),
            #[cfg(test)]
            simulate_full: AtomicBool::new(false),
            _checkpointer: None,
        })
    }

    /// A store in memory, for tests.
    pub fn in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?, MIGRATIONS)
    }

    /// Opens the database at `path` with `migrations` instead of the
    /// release's, for tests of upgrades.
    #[cfg(test)]
    pub(crate) fn open_with(path: &Path, migrations: &[Migration]) -> Result<Self> {
        let conn = Connection::open(path)?;
        schema::refuse_newer(&conn, migrations)?;
        Self::init(conn, migrations)
    }

    fn init(mut conn: Connection, migrations: &[Migration]) -> Result<Self> {
        // WAL survives a kill -9 at any point and lets readers (status
        // commands) run beside the daemon.
        // The busy timeout first: switching to WAL needs a lock that a
        // status command reading beside the daemon may briefly hold.
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        schema::migrate(&mut conn, migrations)?;
        Ok(Self {
            conn: Mutex::new(conn),
            writes: AtomicU64::new(0),
            out_of_space: AtomicBool::new(false),
            #[cfg(test)]
            simulate_full: AtomicBool::new(false),
            _checkpointer: None,
        })
    }

    pub(super) fn with<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&conn).context("state store")
    }

    /// A statement that changes the database (each one its own commit).
    /// Notes whether it failed for want of space ([`Store::out_of_space`]).
    pub(super) fn write<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        #[cfg(test)]
        let f = |c: &Connection| {
            if self.simulate_full.load(Ordering::Relaxed) {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                    Some("database or disk is full".into()),
                ));
            }
            f(c)
        };
        let written = self.with(f);
        match &written {
            Ok(_) => self.out_of_space.store(false, Ordering::Relaxed),
            Err(e) if is_out_of_space(e) => self.out_of_space.store(true, Ordering::Relaxed),
            // Says nothing about space either way.
            Err(_) => {}
        }
        written
    }

    /// Whether the last write failed for want of space on the disk (SQLite
    /// rolled it back: the store is as the write before left it).
    pub fn out_of_space(&self) -> bool {
        self.out_of_space.load(Ordering::Relaxed)
    }

    /// Writes a small row of the store's own, to learn whether a write
    /// fits again after one failed for want of space.
    pub fn probe_write(&self, now_ms: i64) -> Result<()> {
        self.set_meta("room_probed_at", &now_ms.to_string())
    }

    /// Writes sent to the database since it was opened here (for the
    /// metrics: what a thousand sessions cost the disk).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Makes every later write fail as on a full disk (`SQLITE_FULL`, the
    /// store unchanged), or work again, for tests of what a full disk
    /// stops and what it does not.
    #[cfg(test)]
    pub(crate) fn fill_disk(&self, full: bool) {
        self.simulate_full.store(full, Ordering::Relaxed);
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

    /// Sets a key of the store's own.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.write(|c| {
            c.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .map(drop)
        })
    }

    /// A key of the store's own.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.with(|c| {
            c.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                .optional()
        })
    }

    /// Keeps the outpost's watch cursor.
    pub fn save_cursor(&self, outpost_id: &str, cursor: &str) -> Result<()> {
        self.write(|c| {
            c.execute(
                "INSERT INTO cursors (outpost_id, cursor) VALUES (?1, ?2)
                 ON CONFLICT(outpost_id) DO UPDATE SET cursor = excluded.cursor",
                params![outpost_id, cursor],
            )
            .map(drop)
        })
    }

    /// The outpost's watch cursor.
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
}
