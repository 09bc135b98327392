//! The sandbox a start uses, one step at a time as [`plan_start`] decides:
//! the sandbox kept suspended resumed, a leftover destroyed, one restored
//! from the newest snapshot, or a fresh one. Each step's outcome goes back
//! to the planner, which picks the fallback. A function of a [`StepCtx`]
//! and explicit inputs; what it made is returned for the runner to record.

use anyhow::Context;
use common::now_ms;
use fleet::{NetworkPolicy, QueueEntry, SessionKind};
use sandbox::{Handle, Lineage, Resources, SandboxError, SandboxName, SandboxSpec, SnapshotRef};
use serde_json::json;
use tracing::{info, warn};

use super::snapshots::latest_snapshot;
use super::step::{KeepClaim, StartError, StepCtx, renewing};
use crate::planner::{FreshReason, SnapshotObs, StartFailure, StartObs, StartPlan, plan_start};

/// What [`provision`] takes from the session and its outpost.
pub(super) struct ProvisionInput<'a> {
    /// The entry as claimed (its network policy).
    pub(super) entry: &'a QueueEntry,
    /// The session's kind when claimed.
    pub(super) kind: SessionKind,
    /// The sandbox recorded for the session, if any.
    pub(super) recorded: Option<Handle>,
    /// A remote was recorded as started in this session.
    pub(super) remote_recorded: bool,
    /// The outpost the session is served for.
    pub(super) outpost_id: &'a str,
    pub(super) acceptor_id: &'a str,
    pub(super) image: Option<String>,
    pub(super) resources: Resources,
    /// `snapshot_integrity_fallback = fresh`.
    pub(super) corrupt_snapshot_starts_fresh: bool,
}

/// The sandbox [`provision`] found or made.
pub(super) struct Provisioned {
    pub(super) handle: Handle,
    /// It holds the session's workspace already (resumed or restored).
    pub(super) keeps_workspace: bool,
    /// The network policy a created sandbox was given; `None` when one was
    /// resumed.
    pub(super) applied_policy: Option<NetworkPolicy>,
}

/// A sandbox for the session, and whether it already holds the session's
/// workspace (resumed or restored).
pub(super) async fn provision(
    ctx: &StepCtx,
    keeper: &mut impl KeepClaim,
    input: ProvisionInput<'_>,
) -> Result<Provisioned, StartError> {
    let name = SandboxName::for_session(ctx.session_id.as_str());
    let mut found = find_sandbox(ctx, input.recorded.clone(), &name)
        .await
        .map_err(StartError::Failed)?;
    let mut snapshot: Option<SnapshotRef> = None;
    // Highest generation of the session's known snapshots, once looked up
    // (every path to a new sandbox looks first).
    let mut max_generation = 0;
    let mut obs = StartObs {
        kind: input.kind.clone(),
        sandbox_found: false,
        remote_recorded: input.remote_recorded,
        suspend_keeps_memory: ctx.backend.capabilities().suspend_keeps_memory,
        snapshot: SnapshotObs::NotLookedUp,
        corrupt_snapshot_starts_fresh: input.corrupt_snapshot_starts_fresh,
        failed: None,
    };
    // Why the snapshot was refused, for the session's error.
    let mut refused: Option<String> = None;
    loop {
        obs.sandbox_found = found.is_some();
        let plan = plan_start(&obs);
        match plan {
            StartPlan::Reuse => {
                let kept = found
                    .take()
                    .context("no sandbox to resume")
                    .map_err(StartError::Failed)?;
                match ctx.backend.resume(&kept).await {
                    Ok(()) => {
                        info!(
                            session_id = ctx.id(),
                            sandbox = kept.name,
                            "resumed the suspended sandbox"
                        );
                        ctx.event("sandbox_resumed", json!({ "sandbox": kept.name }));
                        return Ok(Provisioned {
                            handle: kept,
                            keeps_workspace: plan.keeps_workspace(),
                            applied_policy: None,
                        });
                    }
                    Err(e) if e.is_gone() => warn!(
                        session_id = ctx.id(),
                        "the suspended sandbox is gone; restoring from the snapshot"
                    ),
                    // A passing failure must not cost the kept memory:
                    // this start fails and is tried again, the sandbox
                    // kept.
                    Err(e) if e.is_transient() => return Err(StartError::Failed(e.into())),
                    Err(e) => {
                        warn!(session_id = ctx.id(), error = %e, "resuming the suspended sandbox failed; restoring from the snapshot");
                        obs.failed = Some(StartFailure::ResumeFailed);
                        found = Some(kept);
                    }
                }
            }
            StartPlan::Discard => {
                let left = found
                    .take()
                    .context("no sandbox to destroy")
                    .map_err(StartError::Failed)?;
                ctx.backend
                    .destroy(&left)
                    .await
                    .map_err(|e| StartError::Failed(e.into()))?;
            }
            StartPlan::FindSnapshot => {
                let lookup = latest_snapshot(ctx, &name).await;
                snapshot = lookup.latest;
                max_generation = lookup.max_generation;
                obs.snapshot = match snapshot {
                    Some(_) => SnapshotObs::Available,
                    None => SnapshotObs::None,
                };
            }
            StartPlan::Restore => {
                let from = snapshot
                    .clone()
                    .context("no snapshot to restore")
                    .map_err(StartError::Failed)?;
                let lineage = sandbox::next_lineage(max_generation, lineage_clock(input.entry));
                match create_sandbox(ctx, keeper, &name, &input, Some(&from), lineage).await {
                    Ok((handle, policy)) => {
                        // `generation` is the restored snapshot's (none for
                        // one made before lineages).
                        ctx.event(
                            "restored",
                            json!({
                                "snapshot": from.id,
                                "bytes": from.size_bytes,
                                "generation": from.lineage.map(|l| l.generation),
                            }),
                        );
                        return Ok(Provisioned {
                            handle,
                            keeps_workspace: plan.keeps_workspace(),
                            applied_policy: Some(policy),
                        });
                    }
                    Err(e) if e.is_gone() => obs.failed = Some(StartFailure::RestoreGone),
                    Err(e) if e.is_unrestorable() => {
                        let reason = sandbox::bounded_output::clip_error(&e.to_string());
                        warn!(session_id = ctx.id(), snapshot = from.id, error = %reason, "the snapshot cannot be restored here");
                        refused = Some(reason);
                        obs.failed = Some(StartFailure::RestoreUnrestorable);
                    }
                    Err(e) if e.is_corrupt() => {
                        warn!(session_id = ctx.id(), error = %e, "the snapshot failed its integrity check");
                        ctx.event(
                            "snapshot_refused",
                            json!({ "snapshot": from.id, "error": e.to_string() }),
                        );
                        refused = Some(e.to_string());
                        obs.failed = Some(StartFailure::RestoreCorrupt);
                    }
                    Err(e) => return Err(StartError::Failed(e.into())),
                }
            }
            StartPlan::GiveUpUnrestorable => {
                let snapshot_id = snapshot.as_ref().map(|s| s.id.clone()).unwrap_or_default();
                return Err(StartError::Unrestorable {
                    snapshot_id,
                    reason: refused
                        .unwrap_or_else(|| "the snapshot cannot be restored here".to_owned()),
                });
            }
            StartPlan::FailCorrupt => {
                return Err(StartError::Corrupt(refused.unwrap_or_else(|| {
                    "the snapshot failed its integrity check".to_owned()
                })));
            }
            StartPlan::Fresh(why) => {
                let missing = match why {
                    FreshReason::New => None,
                    FreshReason::NoSnapshot => {
                        Some("no snapshot to resume from; starting a fresh sandbox")
                    }
                    FreshReason::SnapshotGone => {
                        Some("the snapshot to resume from is gone; starting a fresh sandbox")
                    }
                    FreshReason::SnapshotCorrupt => Some(
                        "the snapshot to resume from failed its integrity check (kept); \
                         starting a fresh sandbox as snapshot_integrity_fallback = fresh allows",
                    ),
                };
                if let Some(message) = missing {
                    warn!(session_id = ctx.id(), "{message}");
                    ctx.event("snapshot_missing", json!({}));
                }
                let lineage = sandbox::next_lineage(max_generation, lineage_clock(input.entry));
                let (handle, policy) = create_sandbox(ctx, keeper, &name, &input, None, lineage)
                    .await
                    .map_err(|e| StartError::Failed(e.into()))?;
                return Ok(Provisioned {
                    handle,
                    keeps_workspace: plan.keeps_workspace(),
                    applied_policy: Some(policy),
                });
            }
        }
    }
}

/// A new sandbox of `lineage` for the session, restored from
/// `restore_from` if given, and the network policy it was given.
async fn create_sandbox(
    ctx: &StepCtx,
    keeper: &mut impl KeepClaim,
    name: &SandboxName,
    input: &ProvisionInput<'_>,
    restore_from: Option<&SnapshotRef>,
    lineage: Lineage,
) -> Result<(Handle, NetworkPolicy), SandboxError> {
    let mut labels = sandbox::session_labels(ctx.id(), input.outpost_id);
    labels.insert(
        sandbox::LABEL_ACCEPTOR_ID.to_owned(),
        input.acceptor_id.to_owned(),
    );
    // Its snapshots carry it, so a resume picks the last suspend's.
    lineage.add_to_labels(&mut labels);
    let policy = input.entry.spec.network_policy.clone();
    let spec = SandboxSpec {
        name: name.clone(),
        labels,
        image: input.image.clone(),
        restore_from: restore_from.cloned(),
        resources: input.resources,
        network: sandbox::NetworkSpec {
            policy: policy.clone(),
            gateway_url: keeper.gateway_url(),
        },
    };
    // A restore from an object store can take longer than the claim
    // lasts: renew while it runs, as a snapshot does.
    let backend = ctx.backend.clone();
    let handle = renewing(keeper, async move { backend.create(&spec).await }).await?;
    Ok((handle, policy))
}

/// When a sandbox is made, for its lineage: the fleet API's clock at the
/// claim (the claim answer's `updated_at`), the one clock every host
/// shares, so sandboxes of successive phases order as the phases did. By a
/// host's own clock a skewed or stepped host's earlier sandbox could look
/// later, and a resume that found no snapshot (of the same generation as
/// the session's first sandbox) would then lose to that first sandbox's
/// late snapshot (bench chaos, seed 1553191015). This host's clock where
/// the answer carries none.
fn lineage_clock(entry: &QueueEntry) -> i64 {
    entry
        .metadata
        .updated_at
        .map_or_else(now_ms, |at| at.unix_millis())
}

async fn find_sandbox(
    ctx: &StepCtx,
    recorded: Option<Handle>,
    name: &SandboxName,
) -> anyhow::Result<Option<Handle>> {
    if let Some(handle) = recorded {
        return Ok(Some(handle));
    }
    Ok(ctx.backend.find(name).await?)
}
