//! Which queue entries to claim or adopt, and how long a session given
//! back here is left to others.

use std::collections::{BTreeMap, BTreeSet};

use fleet::{Phase, Platform, QueueEntry, SessionId, SessionStatus, Timestamp};

use super::stage::{Finish, Stage};
use super::terms::Millis;

/// How long a session this orchestrator gave back (a refused binary, start
/// failures, a failed session) is left to others.
pub(super) const RELEASE_COOLDOWN_MS: Millis = 30_000;
/// How long a session the operator terminated here is not claimed again by
/// this process (its entry returns to the queue, still running for Devin).
pub(super) const OPERATOR_STOP_COOLDOWN_MS: Millis = 600_000;

/// The first wait after a claim call failed (a 5xx, a timeout); it doubles
/// per failure in a row, up to [`CLAIM_RETRY_MAX_MS`].
pub(super) const CLAIM_RETRY_BASE_MS: Millis = 1_000;
/// The longest wait before a failed claim is tried again.
pub(super) const CLAIM_RETRY_MAX_MS: Millis = 60_000;

/// How long a session whose claim call failed `failures` times in a row is
/// not claimed again: jittered (`jitter` in `0.0..=1.0` takes up to half
/// off, so many sessions failing together do not come back together),
/// bounded exponential, and never sooner than the server's `Retry-After`.
pub(crate) fn claim_retry_delay(
    failures: u32,
    retry_after_ms: Option<Millis>,
    jitter: f64,
) -> Millis {
    let factor = 1i64
        .checked_shl(failures.saturating_sub(1).min(20))
        .unwrap_or(i64::MAX);
    let ceiling = CLAIM_RETRY_BASE_MS
        .saturating_mul(factor)
        .min(CLAIM_RETRY_MAX_MS);
    let jittered = ceiling - (ceiling as f64 * jitter.clamp(0.0, 1.0) / 2.0) as Millis;
    jittered.max(retry_after_ms.unwrap_or(0))
}

/// How this process stopped serving a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunnerEnd {
    /// The runner returned in this stage: done, or left running for the
    /// next Garrison.
    Stage(Stage),
    /// A write to the state store failed, so the session was left as its
    /// last record describes (see `SessionRunner::run`), or a claim could
    /// not be recorded and was given back.
    RecordFailed,
}

/// Until when a session whose runner ended here this way must not be
/// claimed again by this process ([`ClaimObs::cooldown`]); `None`: no wait.
pub(crate) fn cooldown_until(end: RunnerEnd, now: Millis) -> Option<Millis> {
    match end {
        RunnerEnd::Stage(Stage::Done(Finish::Released | Finish::Failed))
        | RunnerEnd::RecordFailed => Some(now + RELEASE_COOLDOWN_MS),
        RunnerEnd::Stage(Stage::Done(Finish::Stopped { .. })) => {
            Some(now + OPERATOR_STOP_COOLDOWN_MS)
        }
        RunnerEnd::Stage(_) => None,
    }
}

/// Everything [`plan_claims`] looks at.
pub(crate) struct ClaimObs<'a> {
    /// The time of the observation.
    pub now: Millis,
    /// Who this Garrison is.
    pub acceptor_id: &'a str,
    /// The platform served.
    pub platform: &'a Platform,
    /// Sessions the orchestrator may still take on.
    pub capacity: usize,
    /// Garrison is stopping.
    pub stopping: bool,
    /// The state directory is short of room ([`super::assess_room`]):
    /// nothing new is claimed or adopted, as its record might not be
    /// written.
    pub short_of_room: bool,
    /// The queue, by session id.
    pub entries: &'a BTreeMap<SessionId, QueueEntry>,
    /// Sessions this orchestrator holds (any stage but done).
    pub held: &'a BTreeSet<SessionId>,
    /// Sessions whose claim we lost, with the entry's `updated_at` then: not
    /// tried again until the entry changes.
    pub lost: &'a BTreeMap<SessionId, Option<Timestamp>>,
    /// Sessions this orchestrator gave back (a refused binary, start
    /// failures) and must not claim again before the given time.
    pub cooldown: &'a BTreeMap<SessionId, Millis>,
    /// Sessions the state store has as done here (ended, given back, or
    /// left): a claim of ours on one is not being served.
    pub finished_here: &'a BTreeSet<SessionId>,
    /// Claims this loop released, with the entry's `updated_at` then: not
    /// released again until the entry changes.
    pub released: &'a BTreeMap<SessionId, Option<Timestamp>>,
    /// Sessions whose snapshot this host cannot restore (recorded in the
    /// state store): never claimed here again while the mark stands, since
    /// every claim would fail the same way.
    pub unrestorable: &'a BTreeSet<SessionId>,
}

/// What to do about one queue entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ClaimAction {
    /// Claim this session.
    Claim(SessionId),
    /// The server says we hold it but the state store does not know it (a
    /// crash between claim and record): take it back into our care.
    Adopt(SessionId),
    /// The server says we hold it, but the session is over (terminated or
    /// suspended) or already finished here: give it back now rather than
    /// leave it to expire, as the reference operator does.
    Release(SessionId),
}

/// Decides which entries to claim or adopt, oldest first, within capacity,
/// and which of our stale claims to release (those take no capacity and
/// go on while stopping or short of room: they end work, they start none).
pub(crate) fn plan_claims(obs: &ClaimObs<'_>) -> Vec<ClaimAction> {
    let releases = obs
        .entries
        .values()
        .filter(|e| !obs.held.contains(e.session_id()))
        .filter(|e| to_release(obs, e))
        .map(|e| ClaimAction::Release(e.id().clone()));
    if obs.stopping || obs.short_of_room {
        return releases.collect();
    }
    let mut candidates: Vec<(&QueueEntry, ClaimAction)> = obs
        .entries
        .values()
        .filter(|e| !obs.held.contains(e.session_id()))
        .filter(|e| &e.spec.platform == obs.platform)
        .filter_map(|e| claim_action(obs, e).map(|a| (e, a)))
        .collect();
    // Adoptions first (they are already ours), then oldest first.
    candidates.sort_by_key(|(e, a)| {
        (
            !matches!(a, ClaimAction::Adopt(_)),
            e.metadata
                .created_at
                .map(|t| t.unix_millis())
                .unwrap_or(i64::MAX),
            e.id().clone(),
        )
    });
    candidates
        .into_iter()
        .take(obs.capacity)
        .map(|(_, a)| a)
        .chain(releases)
        .collect()
}

/// A claim of ours that nothing here serves and nothing will: the session
/// is over, or the store has it as done here. A claim the store has at
/// another stage is left alone: its runner stopped on a failed record and
/// its sandbox may still run (see `SessionRunner::run`).
fn to_release(obs: &ClaimObs<'_>, entry: &QueueEntry) -> bool {
    let status = &entry.status;
    let ours =
        status.phase == Phase::Claimed && status.acceptor_id.as_deref() == Some(obs.acceptor_id);
    let over = matches!(
        status.session_status,
        SessionStatus::Suspended | SessionStatus::Terminated
    );
    let unchanged_since_release = obs
        .released
        .get(entry.session_id())
        .is_some_and(|at| *at == entry.metadata.updated_at);
    ours && (over || obs.finished_here.contains(entry.session_id())) && !unchanged_since_release
}

fn claim_action(obs: &ClaimObs<'_>, entry: &QueueEntry) -> Option<ClaimAction> {
    let id = entry.id().clone();
    let status = &entry.status;
    // Released suspended/terminated sessions linger as pending rows: claiming
    // them would flap forever.
    if matches!(
        status.session_status,
        SessionStatus::Suspended | SessionStatus::Terminated
    ) {
        return None;
    }
    let ours = status.acceptor_id.as_deref() == Some(obs.acceptor_id);
    match status.phase {
        Phase::Claimed if ours && obs.finished_here.contains(&id) => None,
        Phase::Claimed if ours => Some(ClaimAction::Adopt(id)),
        Phase::Pending => claimable_unless_lost(obs, entry).then_some(ClaimAction::Claim(id)),
        // Someone else's claim that expired returns to the queue, unless the
        // session runs (it stays with its worker).
        Phase::Claimed => {
            let expired = status
                .claim_deadline
                .is_some_and(|d| d.unix_millis() <= obs.now);
            (expired
                && status.session_status != SessionStatus::Running
                && claimable_unless_lost(obs, entry))
            .then_some(ClaimAction::Claim(id))
        }
        Phase::Unknown(_) => None,
    }
}

fn claimable_unless_lost(obs: &ClaimObs<'_>, entry: &QueueEntry) -> bool {
    if obs.unrestorable.contains(entry.session_id()) {
        return false;
    }
    if obs
        .cooldown
        .get(entry.session_id())
        .is_some_and(|until| obs.now < *until)
    {
        return false;
    }
    match obs.lost.get(entry.session_id()) {
        Some(updated_at) => *updated_at != entry.metadata.updated_at,
        None => true,
    }
}

#[cfg(test)]
mod tests;
