//! The wind-down's steps on the backend and the fleet API: the sandbox
//! snapshotted, suspended or destroyed as [`plan_wind_down`] decides, and
//! the claim released. Functions of a [`StepCtx`]; the runner records what
//! they return.

use std::time::Duration;

use anyhow::anyhow;
use fleet::{FleetClient, ReleaseOutcome};
use sandbox::Handle;
use serde_json::json;
use tracing::warn;

use super::snapshots::{FINISH_ATTEMPTS, Snapshotted, snapshot};
use super::step::{KeepClaim, StepCtx, StepError};
use crate::planner::{SandboxEnd, WindDownObs, plan_wind_down};

/// Ends the session's sandbox (its remote already stopped): snapshots it
/// if the plan says so, then suspends or destroys it. Returns what the
/// planner learned on the way (a failed suspend, a sandbox found gone).
pub(super) async fn end_sandbox(
    ctx: &StepCtx,
    keeper: &mut impl KeepClaim,
    handle: &Handle,
    mut obs: WindDownObs,
) -> Result<WindDownObs, StepError> {
    let backend = ctx.backend.clone();
    if let Some(reason) = plan_wind_down(&obs).snapshot
        && snapshot(ctx, keeper, handle, reason).await? == Snapshotted::SandboxGone
    {
        warn!(
            session_id = ctx.id(),
            sandbox = handle.name,
            "the sandbox is gone (a destroy was cut short); nothing to snapshot, \
             a resume starts from the newest snapshot kept"
        );
        ctx.event("snapshot_skipped", json!({ "reason": "sandbox_gone" }));
        obs.sandbox_gone = true;
    }
    if plan_wind_down(&obs).sandbox == SandboxEnd::Suspend {
        match backend.suspend(handle).await {
            Ok(()) => ctx.event("sandbox_suspended", json!({ "sandbox": handle.name })),
            Err(e) => {
                warn!(session_id = ctx.id(), error = %e, "suspending the sandbox failed; destroying it (the snapshot remains)");
                obs.suspend_failed = true;
            }
        }
    }
    if plan_wind_down(&obs).sandbox == SandboxEnd::Destroy {
        backend.destroy(handle).await.map_err(|e| anyhow!(e))?;
        ctx.event("sandbox_destroyed", json!({}));
    }
    Ok(obs)
}

/// Gives the claim back, a few times over, and says how that went (`None`:
/// no answer; a claim never released expires by itself).
pub(super) async fn release(
    ctx: &StepCtx,
    client: &FleetClient,
    acceptor_id: &str,
) -> Option<ReleaseOutcome> {
    for attempt in 1..=FINISH_ATTEMPTS {
        match client.release(&ctx.session_id, acceptor_id).await {
            Ok(outcome) => {
                let word = match outcome {
                    ReleaseOutcome::Released => "released",
                    ReleaseOutcome::NotHolder => "not_holder",
                    ReleaseOutcome::Gone => "gone",
                };
                ctx.event("released", json!({ "outcome": word }));
                return Some(outcome);
            }
            Err(e) => {
                warn!(session_id = ctx.id(), attempt, error = %e, "releasing the claim failed");
                tokio::time::sleep(Duration::from_millis(500 * attempt as u64)).await;
            }
        }
    }
    // The claim expires by itself; the session is not lost.
    ctx.event("release_failed", json!({}));
    None
}
