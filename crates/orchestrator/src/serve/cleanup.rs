//! Clean-up around the outpost loop: sandboxes no live session of ours owns
//! (left by a crash) are destroyed, and snapshots are deleted once older
//! than the retention period, never because their entry left the queue:
//! those this store recorded, and, in a snapshot store several Garrisons
//! share, any other (whichever host made it, its session known anywhere or
//! nowhere).

use std::sync::Arc;
use std::time::Duration;

use sandbox::Sandbox;
use tracing::{info, warn};

use crate::planner::{Finish, Stage};
use crate::session::Deps;
use crate::store::{Store, StoredSnapshot};
use common::now_ms;

/// Destroys sandboxes of this outpost that no recorded session owns (left
/// by a crash before their session was recorded). Snapshots are kept, and
/// so are the sandboxes of this store's sleeping sessions where suspending
/// keeps memory, for as long as their snapshots are (`retention`).
pub(super) async fn clean_orphans(deps: &Arc<Deps>, retention: Option<Duration>) {
    let keeps_suspended = deps.backend.capabilities().suspend_keeps_memory;
    let sandboxes = match deps.backend.list().await {
        Ok(list) => list,
        Err(e) => {
            warn!(error = %e, "listing sandboxes for clean-up failed");
            return;
        }
    };
    for handle in sandboxes {
        let Some(session_id) = handle.labels.get(sandbox::LABEL_SESSION_ID) else {
            continue;
        };
        // A label no server could have sent names no session recorded here.
        let record = fleet::SessionId::new(session_id.as_str())
            .ok()
            .and_then(|id| deps.store.session(&id).ok().flatten())
            .map(|s| (s.stage, s.updated_at));
        let mine = Mine {
            outpost_id: &deps.outpost.outpost_id,
            acceptor_id: &deps.acceptor_id,
            keeps_suspended,
            asleep_since_cutoff: retention.map(|r| now_ms() - r.as_millis() as i64),
        };
        if is_orphan(&handle.labels, record, &mine) {
            warn!(
                session_id,
                sandbox = handle.name,
                "destroying an orphaned sandbox"
            );
            if let Err(e) = deps.backend.destroy(&handle).await {
                warn!(sandbox = handle.name, error = %e, "destroying an orphan failed");
            }
        }
    }
}

/// Who is cleaning up, for [`is_orphan`].
struct Mine<'a> {
    outpost_id: &'a str,
    acceptor_id: &'a str,
    /// The backend's suspend keeps memory, so sleeping sessions keep their
    /// sandboxes.
    keeps_suspended: bool,
    /// A session asleep since before this (Unix ms) no longer keeps its
    /// sandbox: its snapshots expire at the same age. `None`: kept for good.
    asleep_since_cutoff: Option<i64>,
}

/// Whether a sandbox with these labels, whose session this store has at
/// `(stage, updated_at)` (or not at all), is an orphan of ours to destroy.
fn is_orphan(
    labels: &std::collections::BTreeMap<String, String>,
    record: Option<(Stage, i64)>,
    mine: &Mine<'_>,
) -> bool {
    let label = |key: &str| labels.get(key).map(String::as_str);
    if label(sandbox::LABEL_OUTPOST_ID) != Some(mine.outpost_id)
        || label(sandbox::LABEL_SESSION_ID).is_none()
    {
        return false;
    }
    // Another Garrison's, on a cloud account both use: its own clean-up
    // decides.
    if label(sandbox::LABEL_ACCEPTOR_ID).is_some_and(|a| a != mine.acceptor_id) {
        return false;
    }
    match record {
        Some((Stage::Done(Finish::Suspended), since)) => {
            !mine.keeps_suspended
                || mine
                    .asleep_since_cutoff
                    .is_some_and(|cutoff| since < cutoff)
        }
        Some((stage, _)) => stage.is_done(),
        // Ours but unknown to this store: left by a crash before its
        // session was recorded, and costing compute until the provider's
        // timeout.
        None => true,
    }
}

/// Deletes snapshots older than the retention period.
pub(super) async fn sweep_snapshots(deps: &Arc<Deps>, retention: Option<Duration>) {
    if let Some(retention) = retention {
        expire_snapshots(&deps.store, deps.backend.as_ref(), retention, now_ms()).await;
        collect_shared_snapshots(&deps.store, deps.backend.as_ref(), retention, now_ms()).await;
    }
}

/// Deletes the snapshots in the backend's shared store older than the
/// retention period, whichever Garrison made them (the backend spares any
/// a restore is reading), and forgets those this store recorded; returns
/// how many went.
pub(super) async fn collect_shared_snapshots(
    store: &Store,
    backend: &dyn Sandbox,
    retention: Duration,
    now: i64,
) -> usize {
    let cutoff = now - retention.as_millis() as i64;
    match backend.collect_snapshots_older_than(cutoff).await {
        Ok(collected) => {
            for snapshot in &collected {
                info!(
                    snapshot = snapshot.id,
                    "snapshot expired from the shared store"
                );
                let _ = store.remove_snapshot(&snapshot.id);
            }
            collected.len()
        }
        Err(e) => {
            warn!(error = %e, "collecting old snapshots from the shared store failed");
            0
        }
    }
}

/// Deletes this backend's snapshots recorded before `now - retention`, from
/// the backend and the store; returns how many went. Snapshots are never
/// deleted because an entry left the queue, only by age or termination.
pub(super) async fn expire_snapshots(
    store: &Store,
    backend: &dyn Sandbox,
    retention: Duration,
    now: i64,
) -> usize {
    let cutoff = now - retention.as_millis() as i64;
    let Ok(old) = store.snapshots_older_than(cutoff) else {
        return 0;
    };
    let mut expired = 0;
    for stored in old
        .into_iter()
        .filter(|s| s.snapshot.backend == backend.kind())
    {
        if delete_recorded(
            store,
            backend,
            &stored,
            "snapshot expired",
            "deleting an expired snapshot failed",
        )
        .await
        {
            expired += 1;
        }
    }
    expired
}

/// Deletes a recorded snapshot from the backend, then forgets it in the
/// store; `true` when it went. `deleted` and `failed` are what the log
/// says of each outcome (a failure is left to the next sweep).
pub(super) async fn delete_recorded(
    store: &Store,
    backend: &dyn Sandbox,
    stored: &StoredSnapshot,
    deleted: &str,
    failed: &str,
) -> bool {
    match backend.delete_snapshot(&stored.snapshot).await {
        Ok(()) => {
            info!(
                session_id = stored.session_id.as_str(),
                snapshot = stored.snapshot.id,
                "{deleted}"
            );
            let _ = store.remove_snapshot(&stored.snapshot.id);
            true
        }
        Err(e) => {
            warn!(snapshot = stored.snapshot.id, error = %e, "{failed}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SnapshotReason, StoredSnapshot};

    #[test]
    fn orphans_are_ours_on_this_outpost_and_owned_by_no_live_session() {
        let labels = |acceptor: Option<&str>, outpost: &str| {
            let mut l = sandbox::session_labels("s1", outpost);
            if let Some(a) = acceptor {
                l.insert(sandbox::LABEL_ACCEPTOR_ID.into(), a.into());
            }
            l
        };
        let cloud = Mine {
            outpost_id: "o",
            acceptor_id: "me",
            keeps_suspended: true,
            asleep_since_cutoff: Some(1_000),
        };
        let local = Mine {
            keeps_suspended: false,
            ..cloud
        };
        let asleep = Some((Stage::Done(Finish::Suspended), 2_000));
        let ended = Some((Stage::Done(Finish::Terminated), 2_000));
        let mine = labels(Some("me"), "o");
        // Unknown to the store: a crash before the session was recorded.
        assert!(is_orphan(&mine, None, &cloud));
        assert!(is_orphan(&labels(None, "o"), None, &cloud));
        assert!(is_orphan(&mine, ended, &cloud));
        // A sleeping session keeps its sandbox only where suspend keeps memory.
        assert!(!is_orphan(&mine, asleep, &cloud));
        assert!(is_orphan(&mine, asleep, &local));
        // ... until its snapshots would have expired; for good without a
        // retention.
        let long_asleep = Some((Stage::Done(Finish::Suspended), 500));
        assert!(is_orphan(&mine, long_asleep, &cloud));
        let forever = Mine {
            asleep_since_cutoff: None,
            ..cloud
        };
        assert!(!is_orphan(&mine, long_asleep, &forever));
        // A live session's sandbox is never an orphan.
        assert!(!is_orphan(&mine, Some((Stage::Running, 0)), &cloud));
        // Another Garrison's, another outpost's, or not Garrison's at all.
        assert!(!is_orphan(&labels(Some("them"), "o"), None, &cloud));
        assert!(!is_orphan(&labels(Some("me"), "other"), None, &cloud));
        assert!(!is_orphan(&Default::default(), None, &cloud));
    }

    #[tokio::test]
    async fn snapshots_expire_by_age_only() {
        let dir = tempfile::tempdir().unwrap();
        let backend = host::HostBackend::new(host::HostConfig {
            root: dir.path().join("host"),
            snapshot_dir: dir.path().join("snapshots"),
            snapshot_store: None,
            shim_exe: "/nonexistent".into(),
        })
        .unwrap();
        let store = Store::in_memory().unwrap();
        let mut kept = Vec::new();
        for session in ["old", "new"] {
            let spec = sandbox::SandboxSpec {
                name: sandbox::SandboxName::for_session(session),
                labels: sandbox::session_labels(session, "o"),
                image: None,
                restore_from: None,
                resources: Default::default(),
                network: Default::default(),
            };
            let handle = backend.create(&spec).await.unwrap();
            let snapshot = backend.snapshot(&handle).await.unwrap();
            backend.destroy(&handle).await.unwrap();
            store
                .add_snapshot(&StoredSnapshot {
                    session_id: fleet::SessionId::new(session).unwrap(),
                    reason: SnapshotReason::Suspend,
                    snapshot: snapshot.clone(),
                })
                .unwrap();
            kept.push(snapshot);
        }
        let day = Duration::from_secs(86_400);
        // "now" is 31 days after the old one and 29 days after the new one.
        let now = kept[0].created_at_ms + 31 * 86_400_000;
        let mut newer = kept[1].clone();
        newer.created_at_ms = now - 29 * 86_400_000;
        store.remove_snapshot(&kept[1].id).unwrap();
        store
            .add_snapshot(&StoredSnapshot {
                session_id: fleet::SessionId::new("new").unwrap(),
                reason: SnapshotReason::Suspend,
                snapshot: newer.clone(),
            })
            .unwrap();

        assert_eq!(expire_snapshots(&store, &backend, 30 * day, now).await, 1);
        assert!(!backend.snapshot_exists(&kept[0]).await.unwrap());
        assert!(
            store
                .snapshots(&fleet::SessionId::new("old").unwrap())
                .unwrap()
                .is_empty()
        );
        assert!(backend.snapshot_exists(&newer).await.unwrap());
        assert_eq!(
            store
                .snapshots(&fleet::SessionId::new("new").unwrap())
                .unwrap()
                .len(),
            1
        );
    }

    /// A session whose restarts kept failing leaves a recovery snapshot per
    /// claim; once it has ended (given up here, then terminated by Devin
    /// while no one held it, so no wind-down deleted them), they go by the
    /// same retention as every other snapshot, and the unrestorable mark
    /// with them.
    #[tokio::test]
    async fn recovery_snapshots_of_an_ended_session_expire_like_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let backend = host::HostBackend::new(host::HostConfig {
            root: dir.path().join("host"),
            snapshot_dir: dir.path().join("snapshots"),
            snapshot_store: None,
            shim_exe: "/nonexistent".into(),
        })
        .unwrap();
        let store = Store::in_memory().unwrap();
        let mut rec = crate::store::SessionRecord::new(
            &fleet::SessionId::new("ended").unwrap(),
            "o",
            fleet::SessionKind::Resume,
            "host",
            1,
        );
        rec.stage = Stage::Done(Finish::Failed);
        store.put_session(&rec).unwrap();
        let spec = sandbox::SandboxSpec {
            name: sandbox::SandboxName::for_session("ended"),
            labels: sandbox::session_labels("ended", "o"),
            image: None,
            restore_from: None,
            resources: Default::default(),
            network: Default::default(),
        };
        let handle = backend.create(&spec).await.unwrap();
        let mut recovery = Vec::new();
        for _ in 0..3 {
            let snapshot = backend.snapshot(&handle).await.unwrap();
            store
                .add_snapshot(&StoredSnapshot {
                    session_id: fleet::SessionId::new("ended").unwrap(),
                    reason: SnapshotReason::Recovery,
                    snapshot: snapshot.clone(),
                })
                .unwrap();
            recovery.push(snapshot);
        }
        backend.destroy(&handle).await.unwrap();
        store
            .mark_unrestorable(&crate::store::Unrestorable {
                session_id: fleet::SessionId::new("ended").unwrap(),
                snapshot_id: recovery[2].id.clone(),
                reason: "deep".into(),
                at: 1,
            })
            .unwrap();
        let day = Duration::from_secs(86_400);
        let newest = recovery.iter().map(|s| s.created_at_ms).max().unwrap();
        assert_eq!(
            expire_snapshots(&store, &backend, 30 * day, newest + day.as_millis() as i64).await,
            0
        );
        let later = newest + 31 * 86_400_000;
        assert_eq!(expire_snapshots(&store, &backend, 30 * day, later).await, 3);
        for snapshot in &recovery {
            assert!(!backend.snapshot_exists(snapshot).await.unwrap());
        }
        assert!(
            store
                .snapshots(&fleet::SessionId::new("ended").unwrap())
                .unwrap()
                .is_empty()
        );
        assert!(store.unrestorable_ids().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_shared_store_loses_old_snapshots_whichever_host_made_them() {
        let dir = tempfile::tempdir().unwrap();
        let host = |name: &str| {
            host::HostBackend::new(host::HostConfig {
                root: dir.path().join(name),
                snapshot_dir: dir.path().join("shared"),
                snapshot_store: None,
                shim_exe: "/nonexistent".into(),
            })
            .unwrap()
        };
        let (other, this) = (host("other"), host("this"));
        let spec = sandbox::SandboxSpec {
            name: sandbox::SandboxName::for_session("theirs"),
            labels: sandbox::session_labels("theirs", "o"),
            image: None,
            restore_from: None,
            resources: Default::default(),
            network: Default::default(),
        };
        let handle = other.create(&spec).await.unwrap();
        let theirs = other.snapshot(&handle).await.unwrap();
        other.destroy(&handle).await.unwrap();
        // This host's store has never heard of the session.
        let store = Store::in_memory().unwrap();
        let day = Duration::from_secs(86_400);
        let young = theirs.created_at_ms + 86_400_000;
        assert_eq!(
            collect_shared_snapshots(&store, &this, 30 * day, young).await,
            0
        );
        assert!(this.snapshot_exists(&theirs).await.unwrap());
        let old = theirs.created_at_ms + 31 * 86_400_000;
        assert_eq!(
            collect_shared_snapshots(&store, &this, 30 * day, old).await,
            1
        );
        assert!(!other.snapshot_exists(&theirs).await.unwrap());
    }
}
