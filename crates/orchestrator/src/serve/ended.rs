//! The minute's sweep of what ended work left on this host, besides the
//! hourly one of orphaned sandboxes and old snapshots (`cleanup.rs`):
//! staged snapshot files no snapshot owns (an upload or pack cut off by a
//! store cut, a full disk or a kill), and the snapshots of sessions this
//! store recorded as over whose deletion at their end kept failing.

use std::time::Duration;

use super::cleanup::delete_recorded;
use crate::planner::{Finish, Stage};
use crate::store::Store;
use sandbox::Sandbox;

/// How often the sweep runs.
pub(super) const LEFTOVER_SWEEP: Duration = Duration::from_secs(60);

/// How old a staged file must be before the sweep takes it for abandoned:
/// a pack still writing keeps its file fresh, and an upload or a restore
/// still reading holds it open (the sweep spares open files).
const STAGED_MIN_AGE: Duration = Duration::from_secs(60);

/// Runs both halves of the sweep.
pub(super) async fn sweep_leftovers(store: &Store, backend: &dyn Sandbox) {
    if let Some(snapshots) = backend.snapshot_store() {
        snapshots.sweep_staged(STAGED_MIN_AGE);
    }
    delete_ended_snapshots(store, backend).await;
}

/// Whether a session that finished so has no snapshot to keep.
fn is_over(stage: Stage) -> bool {
    matches!(
        stage,
        Stage::Done(Finish::Terminated)
            | Stage::Done(Finish::Stopped {
                keep_snapshot: false
            })
    )
}

/// Deletes the recorded snapshots of sessions this store has as over
/// (their deletion at the end failed, e.g. through a cut from the store);
/// returns how many went.
pub(super) async fn delete_ended_snapshots(store: &Store, backend: &dyn Sandbox) -> usize {
    let Ok(recorded) = store.snapshots_older_than(i64::MAX) else {
        return 0;
    };
    let mut deleted = 0;
    for stored in recorded
        .into_iter()
        .filter(|s| s.snapshot.backend == backend.kind())
    {
        let over = store
            .session(&stored.session_id)
            .ok()
            .flatten()
            .is_some_and(|rec| is_over(rec.stage));
        if !over {
            continue;
        }
        if delete_recorded(
            store,
            backend,
            &stored,
            "deleted a snapshot of an ended session left by a failed deletion",
            "deleting an ended session's snapshot failed; the next sweep tries again",
        )
        .await
        {
            deleted += 1;
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SessionRecord, SnapshotReason, StoredSnapshot};
    use sandbox::SandboxSpec;

    #[tokio::test]
    async fn recorded_snapshots_of_ended_sessions_go_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let backend = host::HostBackend::new(host::HostConfig {
            root: dir.path().join("host"),
            snapshot_dir: dir.path().join("snapshots"),
            snapshot_store: None,
            shim_exe: "/nonexistent".into(),
        })
        .unwrap();
        let store = Store::in_memory().unwrap();
        let mut snapshots = Vec::new();
        for (session, stage) in [
            ("ended", Stage::Done(Finish::Terminated)),
            ("asleep", Stage::Done(Finish::Suspended)),
            (
                "kept",
                Stage::Done(Finish::Stopped {
                    keep_snapshot: true,
                }),
            ),
        ] {
            let id = fleet::SessionId::new(session).unwrap();
            let mut rec = SessionRecord::new(&id, "o", fleet::SessionKind::New, "host", 0);
            rec.stage = stage;
            store.put_session(&rec).unwrap();
            let handle = backend
                .create(&SandboxSpec {
                    name: sandbox::SandboxName::for_session(session),
                    labels: sandbox::session_labels(session, "o"),
                    image: None,
                    restore_from: None,
                    resources: Default::default(),
                    network: Default::default(),
                })
                .await
                .unwrap();
            let snapshot = backend.snapshot(&handle).await.unwrap();
            backend.destroy(&handle).await.unwrap();
            store
                .add_snapshot(&StoredSnapshot {
                    session_id: id,
                    reason: SnapshotReason::Suspend,
                    snapshot: snapshot.clone(),
                })
                .unwrap();
            snapshots.push(snapshot);
        }

        assert_eq!(delete_ended_snapshots(&store, &backend).await, 1);

        let exists = |n: usize| backend.snapshot_exists(&snapshots[n]);
        assert!(!exists(0).await.unwrap());
        assert!(exists(1).await.unwrap() && exists(2).await.unwrap());
        let left = store.snapshots_older_than(i64::MAX).unwrap();
        assert_eq!(left.len(), 2);
    }
}
