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
    fn cursors_upsert() {
        let store = Store::in_memory().unwrap();
        assert_eq!(store.cursor("o").unwrap(), None);
        store.save_cursor("o", "c1").unwrap();
        store.save_cursor("o", "c2").unwrap();
        assert_eq!(store.cursor("o").unwrap().as_deref(), Some("c2"));
        assert_eq!(store.writes(), 2, "reads are not writes");
    }
}
