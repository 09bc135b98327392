//! One claim round of an outpost loop: the planner decides what to claim,
//! adopt or release from the queue view, and each claim won is recorded (or
//! released again when it cannot be) before its runner starts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fleet::{ClaimError, Timestamp};
use futures::StreamExt;
use serde_json::json;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::metrics::Metrics;
use crate::planner::{ClaimAction, ClaimObs, RunnerEnd, cooldown_until, plan_claims};
use crate::session::{Deps, SessionRunner, now_ms};
use crate::store::SessionRecord;

pub(super) async fn claim_round(
    deps: &Arc<Deps>,
    runners: &mut JoinSet<(String, RunnerEnd)>,
    held: &mut BTreeSet<String>,
    lost: &mut BTreeMap<String, Option<Timestamp>>,
    cooldown: &mut BTreeMap<String, i64>,
    released: &mut BTreeMap<String, Option<Timestamp>>,
) {
    let entries = deps.view.snapshot();
    lost.retain(|id, _| entries.contains_key(id));
    released.retain(|id, _| entries.contains_key(id));
    let now = now_ms();
    cooldown.retain(|_, until| *until > now);
    let finished_here = finished_here(deps, &entries, held);
    let actions = plan_claims(&ClaimObs {
        now: now_ms(),
        acceptor_id: &deps.acceptor_id,
        platform: &deps.outpost.platform,
        capacity: deps.outpost.max_concurrent.saturating_sub(held.len()),
        stopping: deps.stopping.is_cancelled(),
        entries: &entries,
        held,
        lost,
        cooldown,
        finished_here: &finished_here,
        released,
    });
    let mut to_claim = Vec::new();
    for action in actions {
        match action {
            ClaimAction::Claim(session_id) => to_claim.push(session_id),
            ClaimAction::Adopt(session_id) => {
                let Some(entry) = entries.get(&session_id) else {
                    continue;
                };
                // A recorded session that is not held has finished here: the
                // view still shows our claim only until the release echoes
                // back (or, if the release failed, until the claim expires).
                if !matches!(deps.store.session(&session_id), Ok(None)) {
                    continue;
                }
                let rec = claimed_record(deps, entry);
                if deps.store.put_session(&rec).is_err() {
                    continue;
                }
                info!(session_id, "adopting a claim the state store did not know");
                held.insert(session_id.clone());
                let runner = SessionRunner::adopted(deps.clone(), rec);
                runners.spawn(async move { (session_id, runner.run().await) });
            }
            ClaimAction::Release(session_id) => {
                let Some(entry) = entries.get(&session_id) else {
                    continue;
                };
                info!(
                    session_id,
                    session_status = ?entry.status.session_status,
                    "releasing a claim of ours that nothing here serves"
                );
                match deps.client.release(&session_id, &deps.acceptor_id).await {
                    Ok(outcome) => info!(session_id, ?outcome, "stale claim released"),
                    // Not retried until the entry changes: a claim left
                    // alone expires by itself, as before.
                    Err(e) => warn!(session_id, error = %e, "releasing a stale claim failed"),
                }
                released.insert(session_id, entry.metadata.updated_at);
            }
        }
    }
    // A burst of new sessions is claimed in parallel (each claim is one
    // round trip to the fleet API), bounded so a thousand do not open a
    // thousand connections; each answer is then handled in turn.
    let answers: Vec<(String, Result<fleet::QueueEntry, ClaimError>)> =
        futures::stream::iter(to_claim)
            .map(|session_id| async move {
                let answer = deps.client.claim(&session_id, &deps.acceptor_id).await;
                (session_id, answer)
            })
            .buffer_unordered(CLAIMS_IN_FLIGHT)
            .collect()
            .await;
    for (session_id, answer) in answers {
        let Some(seen) = entries.get(&session_id) else {
            continue;
        };
        match answer {
            Ok(entry) => start_claimed(deps, runners, held, cooldown, session_id, entry).await,
            Err(ClaimError::Conflict) => {
                Metrics::inc(&deps.metrics.claims_lost);
                lost.insert(session_id, seen.metadata.updated_at);
            }
            Err(ClaimError::Fleet(e)) => {
                warn!(session_id, error = %e, "claim failed");
            }
        }
    }
}

/// Claims sent to the fleet API at once in a round.
const CLAIMS_IN_FLIGHT: usize = 16;

/// Records a claim won and starts its runner; a claim that cannot be
/// recorded is released again.
async fn start_claimed(
    deps: &Arc<Deps>,
    runners: &mut JoinSet<(String, RunnerEnd)>,
    held: &mut BTreeSet<String>,
    cooldown: &mut BTreeMap<String, i64>,
    session_id: String,
    entry: fleet::QueueEntry,
) {
    Metrics::inc(&deps.metrics.claims_won);
    let rec = claimed_record(deps, &entry);
    if let Err(e) = deps.store.put_session(&rec) {
        // Unrecorded, the claim would be adopted after a restart; still, do
        // not run what we cannot record.
        error!(session_id, error = %e, "recording the claim failed; releasing it");
        let _ = deps.client.release(&session_id, &deps.acceptor_id).await;
        if let Some(until) = cooldown_until(RunnerEnd::RecordFailed, now_ms()) {
            cooldown.insert(session_id, until);
        }
        return;
    }
    info!(session_id, kind = %rec.kind, "claimed");
    if let Err(e) = deps.store.add_event(
        &session_id,
        now_ms(),
        "claimed",
        &json!({ "acceptor_id": deps.acceptor_id, "kind": rec.kind }),
    ) {
        warn!(session_id, error = %e, "recording an event failed");
    }
    if let Err(e) = deps.logs.event(
        &session_id,
        now_ms(),
        "claimed",
        &json!({ "acceptor_id": deps.acceptor_id }),
    ) {
        warn!(session_id, error = %e, "writing an event to the session log failed");
    }
    deps.view.upsert(entry.clone());
    held.insert(session_id.clone());
    let runner = SessionRunner::claimed(deps.clone(), rec, entry);
    runners.spawn(async move { (session_id, runner.run().await) });
}

/// Our claims in the view that no runner holds and the state store has as
/// done here.
fn finished_here(
    deps: &Deps,
    entries: &BTreeMap<String, fleet::QueueEntry>,
    held: &BTreeSet<String>,
) -> BTreeSet<String> {
    entries
        .values()
        .filter(|e| {
            e.status.phase == fleet::Phase::Claimed
                && e.status.acceptor_id.as_deref() == Some(deps.acceptor_id.as_str())
                && !held.contains(e.session_id())
        })
        .filter(
            |e| matches!(deps.store.session(e.session_id()), Ok(Some(rec)) if rec.stage.is_done()),
        )
        .map(|e| e.session_id().to_owned())
        .collect()
}

/// The state-store record of a session just claimed (or adopted).
fn claimed_record(deps: &Deps, entry: &fleet::QueueEntry) -> SessionRecord {
    let mut rec = SessionRecord::new(
        entry.session_id(),
        &deps.outpost.outpost_id,
        entry.spec.kind.clone(),
        deps.backend.kind(),
        now_ms(),
    );
    rec.claim_deadline = entry.status.claim_deadline.map(|d| d.unix_millis());
    rec
}
