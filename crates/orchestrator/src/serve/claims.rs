//! One claim round of an outpost loop: the planner decides what to claim,
//! adopt or release from the queue view; claims go out without waiting
//! for each other, and each claim won is recorded (or released again when
//! it cannot be) before its runner starts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fleet::{ClaimError, SessionId, Timestamp};
use serde_json::json;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

use crate::metrics::Metrics;
use crate::planner::{
    ClaimAction, ClaimObs, RunnerEnd, claim_retry_delay, cooldown_until, plan_claims,
};
use crate::session::Deps;
use crate::session::SessionRunner;
use crate::store::SessionRecord;
use common::now_ms;

/// What a loop keeps between its claim rounds.
#[derive(Default)]
pub(super) struct ClaimState {
    /// Sessions held: a runner serves them, or their claim is in flight.
    pub held: BTreeSet<SessionId>,
    pub lost: BTreeMap<SessionId, Option<Timestamp>>,
    pub cooldown: BTreeMap<SessionId, i64>,
    pub released: BTreeMap<SessionId, Option<Timestamp>>,
    /// Claim calls that failed in a row, per session: each failure puts the
    /// session in `cooldown` for longer (see [`claim_retry_delay`]).
    pub claim_failures: BTreeMap<SessionId, u32>,
}

/// A claim call's answer, with the entry's `updated_at` when it was sent
/// and when it was sent (the claim is reckoned from then: see the claim
/// keeper).
pub(super) struct ClaimReply {
    session_id: SessionId,
    seen_updated_at: Option<Timestamp>,
    sent: tokio::time::Instant,
    answer: Result<fleet::QueueEntry, ClaimError>,
}

/// Claims sent to the fleet API at once: a burst of a thousand new
/// sessions is claimed this many at a time, each answer handled as it
/// arrives, without a thousand connections at once.
pub(super) const CLAIMS_IN_FLIGHT: usize = 16;

/// Plans one round and sends its claims without waiting for them: the
/// answers come back through `claiming` (see [`claim_answered`]), so a
/// claim never waits for another one's answer nor for the next round.
pub(super) async fn claim_round(
    deps: &Arc<Deps>,
    runners: &mut JoinSet<(SessionId, RunnerEnd)>,
    claiming: &mut JoinSet<ClaimReply>,
    state: &mut ClaimState,
) {
    let ClaimState {
        held,
        lost,
        cooldown,
        released,
        claim_failures,
    } = state;
    // Held sessions are the planner's to skip: with a thousand held, the
    // round copies only the few entries it may act on.
    let entries = deps.view.snapshot_where(|e| !held.contains(e.session_id()));
    lost.retain(|id, _| entries.contains_key(id) || held.contains(id));
    released.retain(|id, _| entries.contains_key(id) || held.contains(id));
    claim_failures.retain(|id, _| entries.contains_key(id) || held.contains(id));
    let now = now_ms();
    cooldown.retain(|_, until| *until > now);
    let finished_here = finished_here(deps, &entries, held);
    // A failed read leaves the set empty: such a session is then claimed,
    // fails its restore once more, bounded, and is marked again.
    let unrestorable = deps.store.unrestorable_ids().unwrap_or_default();
    let actions = plan_claims(&ClaimObs {
        now: now_ms(),
        acceptor_id: &deps.acceptor_id,
        platform: &deps.outpost.platform,
        capacity: deps.outpost.max_concurrent.saturating_sub(held.len()),
        stopping: deps.stopping.is_cancelled(),
        short_of_room: deps.room.check().is_short(),
        entries: &entries,
        held,
        lost,
        cooldown,
        finished_here: &finished_here,
        released,
        unrestorable: &unrestorable,
    });
    for action in actions {
        match action {
            ClaimAction::Claim(session_id) => {
                if claiming.len() >= CLAIMS_IN_FLIGHT {
                    // The next round, after an answer, sends the rest.
                    continue;
                }
                let Some(seen) = entries.get(&session_id) else {
                    continue;
                };
                held.insert(session_id.clone());
                let seen_updated_at = seen.metadata.updated_at;
                let deps = deps.clone();
                claiming.spawn(async move {
                    let sent = tokio::time::Instant::now();
                    let answer = deps.client.claim(&session_id, &deps.acceptor_id).await;
                    ClaimReply {
                        session_id,
                        seen_updated_at,
                        sent,
                        answer,
                    }
                });
            }
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
                info!(
                    session_id = session_id.as_str(),
                    "adopting a claim the state store did not know"
                );
                held.insert(session_id.clone());
                let runner = SessionRunner::adopted(deps.clone(), rec);
                runners.spawn(async move { (session_id, runner.run().await) });
            }
            ClaimAction::Release(session_id) => {
                let Some(entry) = entries.get(&session_id) else {
                    continue;
                };
                info!(session_id = session_id.as_str(),
                    session_status = %entry.status.session_status,
                    "releasing a claim of ours that nothing here serves"
                );
                match deps.client.release(&session_id, &deps.acceptor_id).await {
                    Ok(outcome) => info!(
                        session_id = session_id.as_str(),
                        outcome = match outcome {
                            fleet::ReleaseOutcome::Released => "released",
                            fleet::ReleaseOutcome::NotHolder => "not_holder",
                            fleet::ReleaseOutcome::Gone => "gone",
                        },
                        "stale claim released"
                    ),
                    // Not retried until the entry changes: a claim left
                    // alone expires by itself, as before.
                    Err(e) => {
                        warn!(session_id = session_id.as_str(), error = %e, "releasing a stale claim failed")
                    }
                }
                released.insert(session_id, entry.metadata.updated_at);
            }
        }
    }
}

/// Takes in one claim answer: a claim won is recorded and its runner
/// started at once; a lost or failed one gives its slot back.
pub(super) async fn claim_answered(
    deps: &Arc<Deps>,
    runners: &mut JoinSet<(SessionId, RunnerEnd)>,
    state: &mut ClaimState,
    reply: Result<ClaimReply, tokio::task::JoinError>,
) {
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => {
            error!(error = %e, "a claim call panicked");
            return;
        }
    };
    let ClaimReply {
        session_id,
        seen_updated_at,
        sent,
        answer,
    } = reply;
    match answer {
        Ok(entry) => {
            state.claim_failures.remove(&session_id);
            start_claimed(
                deps,
                runners,
                &mut state.held,
                &mut state.cooldown,
                session_id,
                entry,
                sent,
            )
            .await
        }
        Err(ClaimError::Conflict) => {
            Metrics::inc(&deps.metrics.claims_lost);
            state.held.remove(&session_id);
            state.lost.insert(session_id, seen_updated_at);
        }
        Err(ClaimError::Fleet(e)) => {
            state.held.remove(&session_id);
            let failures = state.claim_failures.entry(session_id.clone()).or_default();
            *failures = failures.saturating_add(1);
            let retry_after = e.retry_after().map(|d| d.as_millis() as i64);
            let wait = claim_retry_delay(*failures, retry_after, rand::random::<f64>());
            state.cooldown.insert(session_id.clone(), now_ms() + wait);
            warn!(session_id = session_id.as_str(), error = %e, retry_in_ms = wait, "claim failed");
        }
    }
}

/// Records a claim won and starts its runner; a claim that cannot be
/// recorded is released again.
async fn start_claimed(
    deps: &Arc<Deps>,
    runners: &mut JoinSet<(SessionId, RunnerEnd)>,
    held: &mut BTreeSet<SessionId>,
    cooldown: &mut BTreeMap<SessionId, i64>,
    session_id: SessionId,
    entry: fleet::QueueEntry,
    sent: tokio::time::Instant,
) {
    Metrics::inc(&deps.metrics.claims_won);
    let rec = claimed_record(deps, &entry);
    if let Err(e) = deps.store.put_session(&rec) {
        // Unrecorded, the claim would be adopted after a restart; still, do
        // not run what we cannot record.
        error!(session_id = session_id.as_str(), error = %e, "recording the claim failed; releasing it");
        let _ = deps.client.release(&session_id, &deps.acceptor_id).await;
        held.remove(&session_id);
        if let Some(until) = cooldown_until(RunnerEnd::RecordFailed, now_ms()) {
            cooldown.insert(session_id, until);
        }
        return;
    }
    info!(session_id = session_id.as_str(), kind = %rec.kind, "claimed");
    if let Err(e) = deps.store.add_event(
        &session_id,
        now_ms(),
        "claimed",
        &json!({ "acceptor_id": deps.acceptor_id, "kind": rec.kind }),
    ) {
        warn!(session_id = session_id.as_str(), error = %e, "recording an event failed");
    }
    if let Err(e) = deps.logs.event(
        session_id.as_str(),
        now_ms(),
        "claimed",
        &json!({ "acceptor_id": deps.acceptor_id }),
    ) {
        warn!(session_id = session_id.as_str(), error = %e, "writing an event to the session log failed");
    }
    deps.view.upsert(entry.clone());
    held.insert(session_id.clone());
    let runner = SessionRunner::claimed(deps.clone(), rec, entry, sent);
    runners.spawn(async move { (session_id, runner.run().await) });
}

/// Our claims in the view that no runner holds and the state store has as
/// done here.
fn finished_here(
    deps: &Deps,
    entries: &BTreeMap<SessionId, fleet::QueueEntry>,
    held: &BTreeSet<SessionId>,
) -> BTreeSet<SessionId> {
    entries
        .values()
        .filter(|e| {
            e.status.phase == fleet::Phase::Claimed
                && e.status.acceptor_id.as_deref() == Some(deps.acceptor_id.as_str())
                && !held.contains(e.session_id())
        })
        .filter(|e| matches!(deps.store.session(e.id()), Ok(Some(rec)) if rec.stage.is_done()))
        .map(|e| e.id().clone())
        .collect()
}

/// The state-store record of a session just claimed (or adopted).
fn claimed_record(deps: &Deps, entry: &fleet::QueueEntry) -> SessionRecord {
    let mut rec = SessionRecord::new(
        entry.id(),
        &deps.outpost.outpost_id,
        entry.spec.kind.clone(),
        deps.backend.kind(),
        now_ms(),
    );
    rec.claim_deadline = entry.status.claim_deadline.map(|d| d.unix_millis());
    rec
}
