//! The session's snapshots: taking one (recorded before the sandbox may
//! go), finding the one of the last completed suspend that still exists
//! (by lineage), deleting them all. Functions
//! of a [`StepCtx`], each returning what it found for the runner.

use std::time::Duration;

use anyhow::anyhow;
use sandbox::{Handle, SandboxName, SnapshotRef};
use serde_json::json;
use tracing::warn;

use super::step::{KeepClaim, RecordFailed, StepCtx, StepError, renewing};
use crate::planner::SnapshotReason;
use crate::store::StoredSnapshot;

/// Attempts of a release or a snapshot before giving up on it.
pub(super) const FINISH_ATTEMPTS: u32 = 5;

/// What became of a snapshot the wind-down asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Snapshotted {
    Taken,
    /// The backend has no such sandbox any more.
    SandboxGone,
}

/// Snapshots the sandbox's workspace and records the snapshot, renewing
/// the claim meanwhile: a large workspace can take longer than the claim
/// lasts.
pub(super) async fn snapshot(
    ctx: &StepCtx,
    keeper: &mut impl KeepClaim,
    handle: &Handle,
    reason: SnapshotReason,
) -> Result<Snapshotted, StepError> {
    let mut last_error = None;
    for attempt in 1..=FINISH_ATTEMPTS {
        let started = std::time::Instant::now();
        let backend = ctx.backend.clone();
        let taken = handle.clone();
        let result = renewing(keeper, async move { backend.snapshot(&taken).await }).await;
        keeper.check_renewals()?;
        match result {
            Ok(snapshot) => {
                ctx.metrics.record_snapshot(
                    started.elapsed().as_secs_f64() * 1000.0,
                    snapshot.size_bytes,
                );
                // Unrecorded, the snapshot would be lost to this store
                // once the sandbox is destroyed: the runner stops first.
                ctx.store
                    .add_snapshot(&StoredSnapshot {
                        session_id: ctx.session_id.clone(),
                        reason,
                        snapshot: snapshot.clone(),
                    })
                    .map_err(RecordFailed)?;
                ctx.event(
                    "snapshot",
                    json!({ "snapshot": snapshot.id, "bytes": snapshot.size_bytes, "reason": reason }),
                );
                return Ok(Snapshotted::Taken);
            }
            // No attempt can succeed; what was there to keep was kept
            // before the destroy that made it go.
            Err(e) if e.is_gone() => return Ok(Snapshotted::SandboxGone),
            Err(e) if e.is_transient() => {
                warn!(session_id = ctx.id(), attempt, error = %e, "snapshot failed; retrying");
                last_error = Some(anyhow!(e));
                ctx.pause(Duration::from_secs(attempt as u64)).await;
            }
            // Without a snapshot the sandbox must not be destroyed: the
            // error keeps the session in `finishing` for the operator.
            Err(e) => return Err(anyhow!(e).context("snapshot").into()),
        }
    }
    Err(last_error
        .unwrap_or_else(|| anyhow!("snapshot failed"))
        .into())
}

/// The session's snapshots recorded here and those the backend finds by
/// name (another Garrison sharing the snapshot store may have made them),
/// oldest workspace first ([`SnapshotRef::resume_order`]: by lineage, not
/// by the clock of the host that took each), each once.
pub(super) async fn known_snapshots(ctx: &StepCtx, name: &SandboxName) -> Vec<SnapshotRef> {
    let mut snapshots: Vec<SnapshotRef> = ctx
        .store
        .snapshots(&ctx.session_id)
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.snapshot)
        .collect();
    snapshots.extend(ctx.backend.snapshots_for(name).await.unwrap_or_default());
    sort_for_resume(snapshots)
}

/// `snapshots` in [`SnapshotRef::resume_order`], each id once (the first
/// copy: the state store's and the backend's are the same snapshot).
fn sort_for_resume(mut snapshots: Vec<SnapshotRef>) -> Vec<SnapshotRef> {
    let mut seen = std::collections::HashSet::new();
    snapshots.retain(|s| seen.insert(s.id.clone()));
    snapshots.sort_by(|a, b| a.resume_order().cmp(&b.resume_order()));
    snapshots
}

/// What [`latest_snapshot`] found.
pub(super) struct SnapshotLookup {
    /// The snapshot of the last completed suspend that still exists.
    pub(super) latest: Option<SnapshotRef>,
    /// The highest generation among all the session's known snapshots
    /// (existing or not; 0 without any): a new sandbox must be past it.
    pub(super) max_generation: u64,
}

/// The session's snapshot of the last completed suspend that still
/// exists, from the state store or, for a session another Garrison
/// suspended, from the backend's shared store.
pub(super) async fn latest_snapshot(ctx: &StepCtx, name: &SandboxName) -> SnapshotLookup {
    let known = known_snapshots(ctx, name).await;
    let max_generation = known
        .iter()
        .filter_map(|s| s.lineage.map(|l| l.generation))
        .max()
        .unwrap_or(0);
    for snapshot in known.into_iter().rev() {
        if ctx
            .backend
            .snapshot_exists(&snapshot)
            .await
            .unwrap_or(false)
        {
            return SnapshotLookup {
                latest: Some(snapshot),
                max_generation,
            };
        }
    }
    SnapshotLookup {
        latest: None,
        max_generation,
    }
}

/// Pauses between attempts at deleting an ended session's snapshots: about
/// 90 s in all, enough to outlast a passing cut from the store.
pub(super) const DELETE_BACKOFF: [Duration; 6] = [
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
    Duration::from_secs(16),
    Duration::from_secs(30),
    Duration::from_secs(30),
];

/// Deletes every snapshot of the session, trying again after each pause of
/// [`DELETE_BACKOFF`] while some are left. What is still left then stays
/// recorded in the state store, where the sweep of ended sessions'
/// snapshots finds it (see `serve/ended.rs`); the log says so.
pub(super) async fn delete_snapshots(ctx: &StepCtx) {
    let done = retrying(
        &DELETE_BACKOFF,
        |d| ctx.pause(d),
        || delete_snapshots_once(ctx),
    )
    .await;
    if !done {
        warn!(
            session_id = ctx.id(),
            "deleting the ended session's snapshots kept failing; they stay recorded, \
             and the periodic sweep deletes them later"
        );
        ctx.event("snapshots_left_to_sweep", json!({}));
    }
}

/// Runs `attempt` until it reports that nothing is left (`true`), pausing
/// by each of `backoff` in turn between attempts; `false` when the last
/// attempt still left something.
pub(super) async fn retrying<A, P>(
    backoff: &[Duration],
    pause: impl Fn(Duration) -> P,
    mut attempt: impl FnMut() -> A,
) -> bool
where
    A: Future<Output = bool>,
    P: Future<Output = ()>,
{
    if attempt().await {
        return true;
    }
    for delay in backoff {
        pause(*delay).await;
        if attempt().await {
            return true;
        }
    }
    false
}

/// One pass over the session's snapshots; `true` when every one went.
pub(super) async fn delete_snapshots_once(ctx: &StepCtx) -> bool {
    let name = SandboxName::for_session(ctx.session_id.as_str());
    let mut all_gone = true;
    for snapshot in known_snapshots(ctx, &name).await {
        match ctx.backend.delete_snapshot(&snapshot).await {
            Ok(()) => {
                if let Err(e) = ctx.store.remove_snapshot(&snapshot.id) {
                    warn!(session_id = ctx.id(), snapshot = snapshot.id, error = %e, "forgetting a deleted snapshot failed");
                }
            }
            Err(e) => {
                all_gone = false;
                warn!(session_id = ctx.id(), snapshot = snapshot.id, error = %e, "deleting a snapshot failed")
            }
        }
    }
    all_gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::Lineage;
    use std::cell::Cell;

    #[tokio::test]
    async fn deleting_is_tried_again_after_each_pause_until_nothing_is_left() {
        let tries = Cell::new(0);
        let paused = Cell::new(0);
        let three = [Duration::ZERO; 3];
        // Fails twice (a store cut), then goes through.
        let done = retrying(
            &three,
            |_| async { paused.set(paused.get() + 1) },
            || {
                tries.set(tries.get() + 1);
                let n = tries.get();
                async move { n >= 3 }
            },
        )
        .await;
        assert!(done);
        assert_eq!((tries.get(), paused.get()), (3, 2));

        // Never goes through: every pause used, then given up.
        tries.set(0);
        paused.set(0);
        let done = retrying(
            &three,
            |_| async { paused.set(paused.get() + 1) },
            || {
                tries.set(tries.get() + 1);
                async { false }
            },
        )
        .await;
        assert!(!done);
        assert_eq!((tries.get(), paused.get()), (4, 3));
    }

    #[test]
    fn the_backoff_lasts_about_ninety_seconds() {
        let total: Duration = DELETE_BACKOFF.iter().sum();
        assert_eq!(total, Duration::from_secs(90));
    }

    fn snapshot(id: &str, created_at_ms: i64, generation: Option<u64>) -> SnapshotRef {
        SnapshotRef {
            backend: "host".into(),
            id: id.into(),
            size_bytes: 1,
            created_at_ms,
            base_image: None,
            sha256: None,
            lineage: generation.map(|generation| Lineage {
                generation,
                sandbox_created_at_ms: 0,
            }),
        }
    }

    // The state store's copy and the shared store's of one snapshot are
    // listed once, wherever the lineage puts them.
    #[test]
    fn known_snapshots_are_in_resume_order_each_once() {
        let known = sort_for_resume(vec![
            snapshot("b", 10, Some(2)),
            snapshot("a", 20, Some(1)),
            snapshot("legacy", 30, None),
            snapshot("b", 10, Some(2)),
            snapshot("a", 20, Some(1)),
        ]);
        let ids: Vec<&str> = known.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["legacy", "a", "b"]);
    }
}
