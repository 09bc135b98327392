//! The state store's schema, its version and the migrations between them.
//!
//! The database records the version of its schema in SQLite's
//! `user_version`. Opening applies every migration above it in order, each
//! in one transaction that also sets the new version, so a crash (or a full
//! disk) between two migrations leaves a store at the last one that
//! committed, which the next start carries on from. A store whose version is
//! above every migration this binary knows was written by a newer release:
//! it is refused before anything in it is touched.
//!
//! Version 1 is the schema every release before versioning created; its
//! statements are `IF NOT EXISTS`, so a store made then (version 0, the
//! tables already there) becomes version 1 without a change.
//!
//! To change the schema, append a migration with the next version; never
//! edit one that has been released.

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, TransactionBehavior};

/// One step of the schema.
#[derive(Clone, Copy)]
pub(crate) struct Migration {
    /// The schema version the store has once this is applied.
    pub version: u32,
    /// What it changes, for the log.
    pub what: &'static str,
    /// Statements run in the migration's transaction.
    pub sql: &'static str,
}

/// This release's migrations, in order of version from 1 without gaps.
pub(crate) const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    what: "sessions, snapshots, events, cursors, meta and unrestorable sessions",
    sql: V1,
}];

const V1: &str = r#"
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
CREATE TABLE IF NOT EXISTS unrestorable (
    session_id  TEXT PRIMARY KEY,
    snapshot_id TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          INTEGER NOT NULL
);
"#;

/// The newest version `migrations` reach.
fn latest(migrations: &[Migration]) -> u32 {
    migrations.last().map_or(0, |m| m.version)
}

/// The schema version `conn`'s database records (0 for none).
pub(crate) fn version(conn: &Connection) -> Result<u32> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .context("reading the state store's schema version")
}

/// Refuses a database whose schema is newer than `migrations` reach,
/// without writing to it.
pub(crate) fn refuse_newer(conn: &Connection, migrations: &[Migration]) -> Result<()> {
    let found = version(conn)?;
    let known = latest(migrations);
    if found > known {
        bail!(
            "its schema is version {found}, newer than this garrison {} knows (version \
             {known}): a newer release wrote it. Run that release (or a newer one) on this \
             state directory; going back to an older release is not supported. Nothing in \
             the store was changed",
            env!("CARGO_PKG_VERSION")
        );
    }
    Ok(())
}

/// Brings the database up to the newest of `migrations`, one transaction
/// per migration.
pub(crate) fn migrate(conn: &mut Connection, migrations: &[Migration]) -> Result<()> {
    for migration in migrations {
        // Immediate: a second process opening the same store waits here
        // (busy timeout) and then sees the version this one committed.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .context("starting a schema migration")?;
        let found = version(&tx)?;
        if found >= migration.version {
            continue;
        }
        if found + 1 != migration.version {
            bail!(
                "the state store's schema is version {found} and the next migration known \
                 is {}: the migrations have a gap",
                migration.version
            );
        }
        tx.execute_batch(migration.sql).with_context(|| {
            format!(
                "migrating the state store's schema to version {} ({})",
                migration.version, migration.what
            )
        })?;
        tx.pragma_update(None, "user_version", migration.version)?;
        tx.commit().with_context(|| {
            format!(
                "committing the state store's schema version {}",
                migration.version
            )
        })?;
        if found > 0 {
            tracing::info!(
                from = found,
                to = migration.version,
                what = migration.what,
                "migrated the state store's schema"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
