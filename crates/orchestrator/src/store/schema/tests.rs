use std::path::{Path, PathBuf};

use fleet::SessionKind;
use sandbox::SnapshotRef;

use super::*;
use crate::planner::{Finish, SnapshotReason, Stage};
use crate::store::{SessionRecord, Store, StoredSnapshot, Unrestorable};

/// A state directory's database as every release before schema versions
/// wrote it (user_version 0), with a session of each kind of record:
/// made once by `write_the_unversioned_fixture` and kept in the repository,
/// so a test reads the bytes an upgrade meets, not what today's code writes.
const UNVERSIONED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/state-unversioned.db"
);

/// A migration after today's schema, as the next release might add.
const V2: Migration = Migration {
    version: 2,
    what: "a note on each session",
    sql: "ALTER TABLE sessions ADD COLUMN note TEXT;",
};
const V3: Migration = Migration {
    version: 3,
    what: "an index of sessions by stage",
    sql: "CREATE INDEX sessions_by_stage ON sessions(stage);",
};
const V3_FAILING: Migration = Migration {
    version: 3,
    what: "an index of sessions by stage (broken: as if the process died here)",
    sql: "CREATE INDEX sessions_by_stage ON sessions(stage); SELECT no_such_function();",
};

fn copy_of_fixture(dir: &Path) -> PathBuf {
    let path = dir.join("garrison.db");
    std::fs::copy(UNVERSIONED, &path).unwrap();
    path
}

fn version_of(path: &Path) -> u32 {
    version(&Connection::open(path).unwrap()).unwrap()
}

fn with_next(extra: &[Migration]) -> Vec<Migration> {
    [MIGRATIONS, extra].concat()
}

#[test]
fn a_new_store_records_the_newest_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garrison.db");
    Store::open(&path).unwrap();
    assert_eq!(version_of(&path), latest(MIGRATIONS));
    assert!(latest(MIGRATIONS) >= 1);
}

#[test]
fn migrations_are_numbered_from_one_without_gaps() {
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        assert_eq!(migration.version as usize, index + 1, "{}", migration.what);
    }
}

#[test]
fn a_store_from_before_versions_keeps_everything_through_a_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_of_fixture(dir.path());
    assert_eq!(version_of(&path), 0, "the fixture predates versions");

    let store = Store::open_with(&path, &with_next(&[V2])).unwrap();
    assert_eq!(version_of(&path), 2);
    assert_eq!(
        store.acceptor_id(|| "new".into()).unwrap(),
        "acceptor-fixture"
    );
    assert_eq!(
        store.cursor("outpost-1").unwrap().as_deref(),
        Some("cursor-7")
    );
    let sessions = store.sessions().unwrap();
    let ids: Vec<_> = sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let running = store
        .session(&fleet::SessionId::new("session-running").unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(running.stage, Stage::Running);
    assert_eq!(running.restarts, 1);
    let asleep = store
        .session(&fleet::SessionId::new("session-asleep").unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(asleep.stage, Stage::Done(Finish::Suspended));
    let snapshots = store
        .snapshots(&fleet::SessionId::new("session-asleep").unwrap())
        .unwrap();
    assert_eq!(snapshots.len(), 1);
    assert_eq!(snapshots[0].snapshot.id, "snap-asleep-1");
    assert_eq!(snapshots[0].reason, SnapshotReason::Suspend);
    let events = store
        .events(&fleet::SessionId::new("session-asleep").unwrap(), 0)
        .unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["claimed", "suspended"]);
    assert_eq!(store.unrestorable().unwrap().len(), 1);

    // What the migration added works beside the old rows.
    store
        .with(|c| {
            c.execute(
                "UPDATE sessions SET note = 'kept' WHERE session_id = 'session-asleep'",
                [],
            )
        })
        .unwrap();
}

#[test]
fn a_store_of_a_newer_release_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garrison.db");
    Store::open_with(&path, &with_next(&[V2])).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let before = std::fs::read(&path).unwrap();
    let listing = |dir: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let files = listing(dir.path());

    for opened in [Store::open(&path), Store::open_existing(&path)] {
        let error = format!("{:#}", opened.err().expect("a newer store must be refused"));
        assert!(error.contains("version 2"), "{error}");
        assert!(error.contains("newer release"), "{error}");
        assert!(error.contains(&path.display().to_string()), "{error}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "the store changed");
    assert_eq!(
        listing(dir.path()),
        files,
        "files were added beside the store"
    );
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o640, "its mode changed");
}

#[test]
fn a_crash_between_migrations_leaves_a_store_the_next_start_migrates() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_of_fixture(dir.path());

    let failed = Store::open_with(&path, &with_next(&[V2, V3_FAILING]));
    let error = format!("{:#}", failed.err().expect("the broken migration fails"));
    assert!(error.contains("version 3"), "{error}");
    assert_eq!(version_of(&path), 2, "the migrations before it stay");
    let half: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'sessions_by_stage'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(half, 0, "nothing of the failed migration stays");

    let store = Store::open_with(&path, &with_next(&[V2, V3])).unwrap();
    assert_eq!(version_of(&path), 3);
    assert_eq!(store.sessions().unwrap().len(), 2);
}

/// Writes the fixture above. Run once, when it was made (with the schema
/// every release before versions had), and never again:
/// `cargo test -p orchestrator --lib write_the_unversioned_fixture -- --ignored`.
#[test]
#[ignore = "writes tests/fixtures/state-unversioned.db; run by hand only"]
fn write_the_unversioned_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garrison.db");
    {
        let store = Store::open(&path).unwrap();
        store.acceptor_id(|| "acceptor-fixture".into()).unwrap();
        store.save_cursor("outpost-1", "cursor-7").unwrap();
        let mut running = SessionRecord::new(
            &fleet::SessionId::new("session-running").unwrap(),
            "outpost-1",
            SessionKind::New,
            "local",
            1_000,
        );
        running.stage = Stage::Running;
        running.restarts = 1;
        running.running_at = Some(2_000);
        store.put_session(&running).unwrap();
        let mut asleep = SessionRecord::new(
            &fleet::SessionId::new("session-asleep").unwrap(),
            "outpost-1",
            SessionKind::New,
            "local",
            1_000,
        );
        asleep.stage = Stage::Done(Finish::Suspended);
        store.put_session(&asleep).unwrap();
        store
            .add_snapshot(&StoredSnapshot {
                session_id: fleet::SessionId::new("session-asleep").unwrap(),
                reason: SnapshotReason::Suspend,
                snapshot: SnapshotRef {
                    backend: "local".into(),
                    id: "snap-asleep-1".into(),
                    size_bytes: 4096,
                    created_at_ms: 3_000,
                    base_image: Some("default".into()),
                    sha256: None,
                    lineage: None,
                },
            })
            .unwrap();
        for kind in ["claimed", "suspended"] {
            store
                .add_event(
                    &fleet::SessionId::new("session-asleep").unwrap(),
                    3_000,
                    kind,
                    &serde_json::json!({}),
                )
                .unwrap();
        }
        store
            .mark_unrestorable(&Unrestorable {
                session_id: fleet::SessionId::new("session-asleep").unwrap(),
                snapshot_id: "snap-asleep-1".into(),
                reason: "fixture".into(),
                at: 4_000,
            })
            .unwrap();
    }
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 0).unwrap();
    // Closing the last connection folds the log into the file, which stays
    // in WAL mode as every store does.
    drop(conn);
    assert!(!dir.path().join("garrison.db-wal").exists());
    std::fs::copy(&path, UNVERSIONED).unwrap();
}
