//! Keeping a session's claim: the [`ClaimKeeper`] holds what the claim
//! answers said, renews the claim when asked, and tells how much of it is
//! left; [`keep_claim_alive`] renews it while a slow step runs. What a
//! renewal means for the session (its record, its events, a lost claim's
//! wind-down) is the runner's to record.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use fleet::{ClaimError, FleetClient, FleetError, QueueEntry, Secret, SessionId, SessionStatus};
use tokio::time::Instant;
use tracing::debug;

use crate::planner::{
    ClaimAnswer, LifetimeSource, Millis, Policy, claim_lifetime, give_up_ahead,
    lapsed_claim_is_lost, renewal_due_in, step_budget,
};
use common::now_ms;

/// The shortest wait for a renewal's answer, even on a claim that lapsed
/// (a re-claim after the deadline still succeeds when no one else took it).
const UNANSWERED_AFTER: Duration = Duration::from_secs(2);

/// The least a renewal of a claim about to be given up waits for an
/// answer: enough for a fleet API in reach.
const UNANSWERED_NEAR_LAPSE: Duration = Duration::from_millis(500);

/// The claim-time state of a session, kept in memory only.
#[derive(Default)]
struct Claim {
    connect_token: Option<Secret>,
    gateway_url: Option<String>,
    /// The lifetime the last answer granted (see [`claim_lifetime`]).
    lifetime_ms: Option<Millis>,
    /// The last answer had no usable deadline and nothing was learned yet:
    /// its lifetime is [`crate::planner::ASSUMED_CLAIM_LIFETIME_MS`] until
    /// any answer to this process teaches the real one.
    assumed: bool,
    /// When the request the last answer answered was sent, on the
    /// monotonic clock. The server granted the claim at some moment
    /// between the request and its answer, so the claim is reckoned from
    /// the request: an answer that arrives late (Garrison paused with it
    /// unread, or a slow network) never stretches the claim past the
    /// server's deadline (bench chaos, seed 14030750162014007195: an
    /// answer read 12.6 s after it was sent, its 10-second claim already
    /// given to another acceptor, started a second remote).
    sent: Option<Instant>,
    /// When a renewal was last tried.
    last_attempt: Option<Instant>,
    /// The fleet API was seen to have the session `running` under this
    /// claim (see [`lapsed_claim_is_lost`]).
    seen_running: bool,
}

/// The claim lifetime the server's answers implied, shared by the runners
/// of an outpost: the lifetime is the server's, not a session's, so an
/// answer without a deadline is read with what any answer taught.
#[derive(Debug, Default)]
pub(crate) struct LearnedLifetime(AtomicI64);

impl LearnedLifetime {
    fn get(&self) -> Option<Millis> {
        Some(self.0.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    fn set(&self, ms: Millis) {
        self.0.store(ms, Ordering::Relaxed);
    }
}

impl Claim {
    /// Takes in a claim answer to a request sent at `sent` (monotonic).
    fn take_answer(&mut self, entry: &QueueEntry, sent: Instant, learned: &LearnedLifetime) {
        let answer = ClaimAnswer {
            deadline: entry.status.claim_deadline.map(|d| d.unix_millis()),
            server_now: entry.metadata.updated_at.map(|t| t.unix_millis()),
            local_now: now_ms(),
        };
        let (lifetime, source) = claim_lifetime(&answer, learned.get());
        self.assumed = source == LifetimeSource::Assumed;
        match source {
            LifetimeSource::ServerClock | LifetimeSource::LocalClock => learned.set(lifetime),
            LifetimeSource::Previous | LifetimeSource::Assumed => debug!(
                session_id = entry.session_id(),
                lifetime_ms = lifetime,
                source = match source {
                    LifetimeSource::Previous => "previous",
                    _ => "assumed",
                },
                deadline_ms = answer.deadline,
                server_now_ms = answer.server_now,
                "the claim answer has no usable deadline"
            ),
        }
        self.lifetime_ms = Some(lifetime);
        self.sent = Some(sent);
        self.note_status(&entry.status.session_status);
        if let Some(token) = &entry.status.connect_token {
            self.connect_token = Some(token.clone());
        }
        if entry.status.gateway_url.is_some() {
            self.gateway_url = entry.status.gateway_url.clone();
        }
    }

    /// Takes in a status the fleet API showed for the session.
    fn note_status(&mut self, status: &SessionStatus) {
        if *status == SessionStatus::Running {
            self.seen_running = true;
        }
    }

    /// The lifetime of the claim held: an assumed one gives way to what
    /// any answer taught since.
    fn lifetime(&self, learned: &LearnedLifetime) -> Option<Millis> {
        match learned.get() {
            Some(ms) if self.assumed => Some(ms),
            _ => self.lifetime_ms,
        }
    }

    /// The expiry (the last request's sending plus its answer's lifetime)
    /// on the clock whose reading is `now` at `at`.
    fn expires_at(&self, now: Millis, at: Instant, learned: &LearnedLifetime) -> Option<Millis> {
        let sent = self.sent?;
        Some(now + signed_ms(sent, at) + self.lifetime(learned)?)
    }

    /// The last renewal attempt on the clock whose reading is `now` at `at`.
    fn last_attempt_at(&self, now: Millis, at: Instant) -> Option<Millis> {
        self.last_attempt.map(|t| now + signed_ms(t, at))
    }
}

/// `to - from` in milliseconds, negative when `to` is earlier.
fn signed_ms(to: Instant, from: Instant) -> Millis {
    if to >= from {
        (to - from).as_millis() as Millis
    } else {
        -((from - to).as_millis() as Millis)
    }
}

/// What a renewal found; the runner records it.
pub(super) enum Renewal {
    /// The claim is ours for longer: the server's answer.
    Renewed(Box<QueueEntry>),
    /// Someone else holds the session now.
    Lost,
    /// No answer came before the claim's expiry (the fleet API is out of
    /// reach): retried like a failure, unless the claim lapsed.
    Unanswered,
    /// The entry is gone from the queue.
    Gone,
    /// A passing failure: retried when the claim is next due.
    Failed(FleetError),
}

/// Owns a session's claim: the state the answers left and the renew call.
pub(super) struct ClaimKeeper {
    session_id: SessionId,
    client: FleetClient,
    acceptor_id: String,
    learned: Arc<LearnedLifetime>,
    policy: Policy,
    claim: Claim,
}

impl ClaimKeeper {
    /// A keeper that has seen no answer yet (a session adopted from the
    /// state store: no connect token in memory).
    pub(super) fn new(
        session_id: SessionId,
        client: FleetClient,
        acceptor_id: &str,
        learned: Arc<LearnedLifetime>,
        policy: Policy,
    ) -> Self {
        Self {
            session_id,
            client,
            acceptor_id: acceptor_id.to_owned(),
            learned,
            policy,
            claim: Claim::default(),
        }
    }

    /// Takes in the answer to a claim request sent at `sent`.
    pub(super) fn take_answer(&mut self, entry: &QueueEntry, sent: Instant) {
        self.claim.take_answer(entry, sent, &self.learned);
    }

    /// The connect token the claim handed out, if one is in memory.
    pub(super) fn connect_token(&self) -> Option<&Secret> {
        self.claim.connect_token.as_ref()
    }

    /// The gateway the claim named, if any.
    pub(super) fn gateway_url(&self) -> Option<&str> {
        self.claim.gateway_url.as_deref()
    }

    /// The lifetime of the claim held (see [`Claim::lifetime`]).
    pub(super) fn lifetime(&self) -> Option<Millis> {
        self.claim.lifetime(&self.learned)
    }

    /// The expiry on the clock whose reading is `now` at `at`.
    pub(super) fn expires_at(&self, now: Millis, at: Instant) -> Option<Millis> {
        self.claim.expires_at(now, at, &self.learned)
    }

    /// The last renewal attempt on the clock whose reading is `now` at `at`.
    pub(super) fn last_attempt_at(&self, now: Millis, at: Instant) -> Option<Millis> {
        self.claim.last_attempt_at(now, at)
    }

    /// Time left on the claim; `None` when no claim answer came yet.
    pub(super) fn time_left(&self) -> Option<Millis> {
        self.expires_at(0, Instant::now())
    }

    /// How long until the claim must be renewed (see the planner's
    /// [`crate::planner::renewal_due_in`]).
    pub(super) fn due_in(&self) -> Duration {
        let at = Instant::now();
        let ms = renewal_due_in(
            0,
            self.expires_at(0, at),
            self.lifetime(),
            self.claim.connect_token.is_some(),
            self.last_attempt_at(0, at),
            &self.policy,
        );
        Duration::from_millis(ms as u64)
    }

    /// Whether enough claim time is left to begin a slow step.
    pub(super) fn has_budget(&self) -> bool {
        let budget = step_budget(self.lifetime(), &self.policy);
        self.time_left().is_none_or(|left| left >= budget)
    }

    /// Takes in a status the fleet API showed for the session.
    pub(super) fn note_status(&mut self, status: &SessionStatus) {
        self.claim.note_status(status);
    }

    /// Whether the claim must be given up as lost after a renewal that
    /// failed or went unanswered (see [`lapsed_claim_is_lost`]).
    pub(super) fn lapsed(&self) -> bool {
        lapsed_claim_is_lost(self.time_left(), self.lifetime(), self.claim.seen_running)
    }

    /// Asks the server for more time on the claim and takes in its answer.
    /// The call waits no longer than the claim has left (at least
    /// [`UNANSWERED_AFTER`]), so a fleet API out of reach is found out by
    /// the time the claim lapses, not a request timeout later; for a
    /// session not seen running, no longer than until the claim is to be
    /// given up (see [`lapsed_claim_is_lost`]), at least
    /// [`UNANSWERED_NEAR_LAPSE`].
    pub(super) async fn renew(&mut self) -> Renewal {
        let sent = Instant::now();
        self.claim.last_attempt = Some(sent);
        let ahead = give_up_ahead(self.lifetime());
        let seen_running = self.claim.seen_running;
        let wait = self.time_left().map_or(Duration::MAX, |left| {
            if seen_running {
                Duration::from_millis(left.max(0) as u64).max(UNANSWERED_AFTER)
            } else {
                Duration::from_millis((left - ahead).max(0) as u64).max(UNANSWERED_NEAR_LAPSE)
            }
        });
        let call = self.client.claim(&self.session_id, &self.acceptor_id);
        let Ok(answer) = tokio::time::timeout(wait, call).await else {
            return Renewal::Unanswered;
        };
        match answer {
            Ok(entry) => {
                self.take_answer(&entry, sent);
                Renewal::Renewed(Box::new(entry))
            }
            Err(ClaimError::Conflict) => Renewal::Lost,
            Err(ClaimError::Fleet(FleetError::NotFound { .. })) => Renewal::Gone,
            Err(ClaimError::Fleet(e)) => Renewal::Failed(e),
        }
    }
}

/// Drives a slow `step` to completion while keeping the claim alive: `renew`
/// runs whenever `due_in` says the claim is due.
pub(super) async fn keep_claim_alive<S, T>(
    state: &mut S,
    step: impl Future<Output = T>,
    due_in: impl Fn(&S) -> Duration,
    mut renew: impl AsyncFnMut(&mut S),
) -> T {
    // Never spin: a renewal that failed leaves the claim due at once.
    const MIN_GAP: Duration = Duration::from_millis(200);
    let mut step = std::pin::pin!(step);
    loop {
        let wait = due_in(state).max(MIN_GAP);
        tokio::select! {
            out = &mut step => return out,
            _ = tokio::time::sleep(wait) => renew(state).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct FakeClaim {
        deadline: tokio::time::Instant,
        renewals: u32,
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_step_keeps_the_claim_alive() {
        let lifetime = Duration::from_secs(2);
        let mut claim = FakeClaim {
            deadline: tokio::time::Instant::now() + lifetime,
            renewals: 0,
        };
        let out = keep_claim_alive(
            &mut claim,
            async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                42
            },
            |c: &FakeClaim| {
                c.deadline
                    .saturating_duration_since(tokio::time::Instant::now())
                    / 2
            },
            async |c: &mut FakeClaim| {
                assert!(
                    tokio::time::Instant::now() < c.deadline,
                    "the claim expired during the step"
                );
                c.deadline = tokio::time::Instant::now() + lifetime;
                c.renewals += 1;
            },
        )
        .await;
        assert_eq!(out, 42);
        assert!(
            claim.renewals >= 9,
            "renewed {} times over 10 s of 2 s claims",
            claim.renewals
        );
    }

    #[test]
    fn an_assumed_lifetime_gives_way_to_a_learned_one() {
        let answer = |deadline: Option<Millis>| {
            let mut e: QueueEntry = serde_json::from_value(json!({
                "metadata": {"session_id": "s1"},
                "status": {"phase": "claimed"}
            }))
            .unwrap();
            let now = now_ms();
            e.metadata.updated_at = fleet::Timestamp::from_unix_millis(now);
            e.status.claim_deadline =
                deadline.and_then(|d| fleet::Timestamp::from_unix_millis(now + d));
            e
        };
        let learned = LearnedLifetime::default();
        let mut blind = Claim::default();
        blind.take_answer(&answer(None), Instant::now(), &learned);
        assert_eq!(
            blind.lifetime(&learned),
            Some(crate::planner::ASSUMED_CLAIM_LIFETIME_MS)
        );
        // Another session's answer teaches the server's 6 s lifetime.
        let mut taught = Claim::default();
        taught.take_answer(&answer(Some(6_000)), Instant::now(), &learned);
        assert_eq!(blind.lifetime(&learned), Some(6_000));
        // Later answers without a deadline use it at once.
        taught.take_answer(&answer(None), Instant::now(), &learned);
        assert_eq!(taught.lifetime(&learned), Some(6_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_step_does_not_renew() {
        let mut renewals = 0u32;
        let out = keep_claim_alive(
            &mut renewals,
            async { 7 },
            |_: &u32| Duration::from_secs(60),
            async |n: &mut u32| *n += 1,
        )
        .await;
        assert_eq!((out, renewals), (7, 0));
    }
}
