//! The runner's side of a renewal: what the [`ClaimKeeper`]'s answer means
//! for the session, recorded, and the [`KeepClaim`] hook a slow step renews
//! through.
//!
//! [`ClaimKeeper`]: super::claim_keeper::ClaimKeeper

use std::time::Duration;

use serde_json::json;
use tracing::{debug, warn};

use super::SessionRunner;
use super::claim_keeper::Renewal;
use super::step::{KILL_GRACE, KeepClaim, RecordFailed};
use crate::metrics::Metrics;
use crate::planner::{EntryObs, Stage, finish_on_claim_lost};

impl SessionRunner {
    pub(super) async fn renew(&mut self) -> Result<(), RecordFailed> {
        match self.claim.renew().await {
            Renewal::Renewed(entry) => {
                let entry = *entry;
                Metrics::inc(&self.deps.metrics.claim_renewals);
                // The server's deadline is kept for display only: decisions
                // use the expiry computed at receipt.
                self.rec.claim_deadline = entry.status.claim_deadline.map(|d| d.unix_millis());
                if let Some(token) = &entry.status.connect_token {
                    self.deps
                        .logs
                        .redactor()
                        .add_claim_token(self.rec.session_id.as_str(), token.expose());
                }
                self.entry_obs = EntryObs::Present(entry.status.session_status.clone());
                self.deps.view.upsert(entry.clone());
                self.note_entry(entry);
                // The claim lives in the keeper: the recorded deadline is
                // for display, so a renewal goes on without its record (a
                // full disk must not cost a running session its claim).
                if let Err(failed) = self.save() {
                    debug!(session_id = self.id(), error = %failed, "recording the renewed deadline failed; it is kept for the next record");
                }
                self.event(
                    "claim_renewed",
                    json!({ "claim_deadline": self.rec.claim_deadline }),
                );
                Ok(())
            }
            Renewal::Lost => {
                warn!(
                    session_id = self.id(),
                    "the claim was lost to another acceptor"
                );
                self.event("claim_lost", json!({}));
                self.give_up_claim().await
            }
            Renewal::Gone => {
                // The entry is gone: not a passing error to retry, but what a
                // DELETED event says, and wound down the same way.
                warn!(
                    session_id = self.id(),
                    "renewing the claim found the entry gone"
                );
                self.event("entry_gone", json!({ "during": "renewal" }));
                self.deps.view.remove(&self.rec.session_id);
                self.entry_obs = EntryObs::Gone;
                Ok(())
            }
            Renewal::Failed(_) | Renewal::Unanswered if self.claim.lapsed() => {
                warn!(
                    session_id = self.id(),
                    "the claim lapsed before the fleet API saw the session running and could \
                     not be renewed; another acceptor may hold it now, so this one stops"
                );
                self.event("claim_lapsed", json!({}));
                self.give_up_claim().await
            }
            Renewal::Failed(e) => {
                // Retried when the planner next finds the claim due, paced
                // by MIN_RENEW_INTERVAL_MS.
                warn!(session_id = self.id(), error = %e, "renewing the claim failed; retrying");
                Ok(())
            }
            Renewal::Unanswered => {
                warn!(
                    session_id = self.id(),
                    "renewing the claim got no answer before its deadline; retrying"
                );
                Ok(())
            }
        }
    }

    /// Someone else may hold the session now: our remote must not run
    /// beside theirs. Keeps the work, gives nothing back.
    async fn give_up_claim(&mut self) -> Result<(), RecordFailed> {
        let finish = finish_on_claim_lost(self.rec.stage);
        let recorded = self.set_stage(Stage::Finishing(finish));
        // Stopping our remote is what keeps it from running beside
        // theirs, so it happens even when the record failed.
        if let (Some(handle), Some(process)) = (self.rec.handle.clone(), self.rec.process.clone()) {
            let _ = self.deps.backend.kill(&handle, &process, KILL_GRACE).await;
        }
        recorded
    }
}

impl KeepClaim for SessionRunner {
    fn due_in(&self) -> Duration {
        self.claim.due_in()
    }

    fn has_budget(&self) -> bool {
        self.claim.has_budget()
    }

    /// A renewal during a slow step: a failed record is kept for the step
    /// to stop on when it returns.
    async fn renew_in_step(&mut self) {
        if let Err(failed) = self.renew().await {
            self.failed_record.get_or_insert(failed);
        }
    }

    fn check_renewals(&mut self) -> Result<(), RecordFailed> {
        match self.failed_record.take() {
            Some(failed) => Err(failed),
            None => Ok(()),
        }
    }

    fn claim_lost(&self) -> bool {
        matches!(self.rec.stage, Stage::Finishing(_) | Stage::Done(_))
    }

    fn gateway_url(&self) -> Option<String> {
        SessionRunner::gateway_url(self)
    }
}
