//! Keeping the claim: renewing it, and how much of it is left for a slow
//! step.

use std::time::Duration;

use fleet::{ClaimError, QueueEntry, Secret};
use serde_json::json;
use tracing::warn;

use super::{KILL_GRACE, RecordFailed, SessionRunner, now_ms};
use crate::metrics::Metrics;
use crate::planner::{EntryObs, Millis, Stage, finish_on_claim_lost};

/// A slow step is not begun with less claim time left than this.
const MIN_STEP_BUDGET_MS: Millis = 10_000;

/// The claim-time state of a session, kept in memory only.
#[derive(Default)]
pub(super) struct Claim {
    pub(super) connect_token: Option<Secret>,
    pub(super) gateway_url: Option<String>,
    pub(super) lifetime_ms: Option<Millis>,
}

pub(super) fn lifetime_of(entry: &QueueEntry) -> Option<Millis> {
    entry
        .status
        .claim_deadline
        .map(|d| d.unix_millis() - now_ms())
}

impl SessionRunner {
    /// Time left on the claim; `None` when no deadline is known.
    pub(super) fn claim_time_left(&self) -> Option<Millis> {
        self.rec.claim_deadline.map(|d| d - now_ms())
    }

    /// How long until the claim must be renewed (see the planner's margin).
    pub(super) fn renewal_due_in(&self) -> Duration {
        let Some(deadline) = self.rec.claim_deadline else {
            return Duration::from_secs(1);
        };
        let margin = match self.claim.lifetime_ms {
            Some(lifetime) if lifetime > 0 => self.deps.policy.renew_margin_ms.min(lifetime / 2),
            _ => self.deps.policy.renew_margin_ms,
        };
        Duration::from_millis((deadline - margin - now_ms()).max(0) as u64)
    }

    pub(super) fn has_budget(&self) -> bool {
        self.claim_time_left()
            .is_none_or(|left| left >= MIN_STEP_BUDGET_MS)
    }

    pub(super) async fn renew(&mut self) -> Result<(), RecordFailed> {
        match self
            .deps
            .client
            .claim(self.id(), &self.deps.acceptor_id)
            .await
        {
            Ok(entry) => {
                Metrics::inc(&self.deps.metrics.claim_renewals);
                self.rec.claim_deadline = entry.status.claim_deadline.map(|d| d.unix_millis());
                self.claim.lifetime_ms = lifetime_of(&entry);
                if let Some(token) = &entry.status.connect_token {
                    self.deps.logs.redactor().add(token.expose());
                    self.claim.connect_token = Some(token.clone());
                }
                if entry.status.gateway_url.is_some() {
                    self.claim.gateway_url = entry.status.gateway_url.clone();
                }
                self.entry_obs = EntryObs::Present(entry.status.session_status.clone());
                self.deps.view.upsert(entry.clone());
                self.note_entry(entry);
                self.save()?;
                self.event(
                    "claim_renewed",
                    json!({ "claim_deadline": self.rec.claim_deadline }),
                );
                Ok(())
            }
            Err(ClaimError::Conflict) => {
                // Someone else holds the session now: our remote must not run
                // beside theirs. Keep the work, give nothing back.
                warn!(
                    session_id = self.id(),
                    "the claim was lost to another acceptor"
                );
                self.event("claim_lost", json!({}));
                let finish = finish_on_claim_lost(self.rec.stage);
                let recorded = self.set_stage(Stage::Finishing(finish));
                // Stopping our remote is what keeps it from running beside
                // theirs, so it happens even when the record failed.
                if let (Some(handle), Some(process)) =
                    (self.rec.handle.clone(), self.rec.process.clone())
                {
                    let _ = self.deps.backend.kill(&handle, &process, KILL_GRACE).await;
                }
                recorded
            }
            Err(ClaimError::Fleet(e)) => {
                warn!(session_id = self.id(), error = %e, "renewing the claim failed; retrying");
                self.pause(Duration::from_secs(1)).await;
                Ok(())
            }
        }
    }

    /// A renewal during a slow step (see [`keep_claim_alive`]): a failed
    /// record is kept for the step to stop on when it returns
    /// ([`SessionRunner::check_renewals`]).
    pub(super) async fn renew_in_step(&mut self) {
        if let Err(failed) = self.renew().await {
            self.failed_record.get_or_insert(failed);
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
