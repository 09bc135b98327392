//! Durable state in SQLite: the acceptor id, watch cursors, and per session
//! its claim, sandbox, remote process, snapshots and event history.
//!
//! The executor writes a step down before it starts it and again when it
//! ends, so a restarted Garrison knows exactly where each session was. The
//! connect token is never stored: after a restart the claim is renewed for a
//! fresh one. The database file is created with mode 0600.
//!
//! The schema's versions and migrations are in `store/schema.rs`; the
//! connection and the small keyed tables (meta, cursors) in `store/db.rs`;
//! the session records in `store/sessions.rs`, the snapshots and event
//! history in `store/history.rs`.

pub(crate) mod bound;
mod checkpoint;
mod db;
mod history;
mod schema;
mod sessions;
mod unrestorable;

pub use crate::planner::SnapshotReason;
pub use db::Store;
pub(crate) use db::{io_out_of_space, is_out_of_space};
pub use history::Event;
pub(crate) use history::StoredSnapshot;
pub use sessions::{SessionRecord, stage_label};
pub use unrestorable::Unrestorable;

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use fleet::SessionKind;

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
    fn an_existing_store_opens_for_reading_and_a_missing_one_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garrison.db");
        assert!(Store::open_existing(&path).is_err());
        assert!(!path.exists());
        let store = Store::open(&path).unwrap();
        store
            .put_session(&SessionRecord::new(
                &fleet::SessionId::new("s").unwrap(),
                "o",
                SessionKind::New,
                "host",
                1,
            ))
            .unwrap();
        let reader = Store::open_existing(&path).unwrap();
        assert_eq!(reader.sessions().unwrap().len(), 1);
    }

    #[test]
    fn the_log_is_checkpointed_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garrison.db");
        let store = Store::open(&path).unwrap();
        let auto: i64 = store
            .with(|c| c.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(auto, 0, "commits do not checkpoint");
        for n in 0..2_000 {
            store.save_cursor("o", &format!("cursor-{n}")).unwrap();
        }
        // Only a checkpoint puts the tables (written to the log) into the
        // database file; the thread does within a second or two, and the
        // generous bound only stops a hung test.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::metadata(&path).unwrap().len() <= 4096 {
            assert!(std::time::Instant::now() < deadline, "never checkpointed");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    #[test]
    fn a_write_that_finds_the_disk_full_is_told_apart_and_a_later_one_clears_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("garrison.db")).unwrap();
        store.save_cursor("o", "before").unwrap();
        // The database may not grow: SQLite answers SQLITE_FULL, as on a
        // full disk.
        let pages: i64 = store
            .with(|c| c.query_row("PRAGMA page_count", [], |r| r.get(0)))
            .unwrap();
        store
            .with(|c| c.pragma_update(None, "max_page_count", pages))
            .unwrap();
        let big = "x".repeat(1 << 20);
        let refused = store.set_meta("big", &big).unwrap_err();
        assert!(db::is_out_of_space(&refused), "{refused:#}");
        assert!(store.out_of_space());
        // Another kind of failure says nothing about space.
        store
            .with(|c| c.pragma_update(None, "query_only", true))
            .unwrap();
        assert!(!db::is_out_of_space(&store.probe_write(1).unwrap_err()));
        assert!(store.out_of_space());
        store
            .with(|c| c.pragma_update(None, "query_only", false))
            .unwrap();

        store
            .with(|c| c.pragma_update(None, "max_page_count", 1 << 30))
            .unwrap();
        store.probe_write(2).unwrap();
        assert!(!store.out_of_space());
        // Nothing of the refused write is there; the rest is intact.
        assert_eq!(store.meta("big").unwrap(), None);
        assert_eq!(store.cursor("o").unwrap().as_deref(), Some("before"));
        let integrity: String = store
            .with(|c| c.query_row("PRAGMA integrity_check", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(integrity, "ok");
    }

    #[test]
    fn a_full_file_system_is_told_apart_from_other_failures() {
        let full = anyhow::Error::from(std::io::Error::from_raw_os_error(
            nix::errno::Errno::ENOSPC as i32,
        ))
        .context("writing the session log");
        assert!(db::is_out_of_space(&full));
        let denied =
            anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert!(!db::is_out_of_space(&denied));
    }

    #[test]
    fn cursors_upsert() {
        let store = Store::in_memory().unwrap();
        assert_eq!(store.cursor("o").unwrap(), None);
        store.save_cursor("o", "c1").unwrap();
        store.save_cursor("o", "c2").unwrap();
        assert_eq!(store.cursor("o").unwrap().as_deref(), Some("c2"));
        assert_eq!(store.writes(), 2, "reads are not writes");
    }
}
