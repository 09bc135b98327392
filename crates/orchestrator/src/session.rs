//! The executor for one held session.
//!
//! A [`SessionRunner`] observes (the queue view, the remote's status, the
//! remote's output), asks [`plan_session`] what to do, does it, writes the
//! outcome down, and repeats until the session is done or Garrison stops.
//! Each step is recorded before it starts, so a runner created from the
//! state store after a crash continues where the last one stopped; a step
//! whose record cannot be written does not run (see [`SessionRunner::run`]).

use std::sync::Arc;
use std::time::Duration;

use fleet::{NetworkPolicy, QueueEntry};
use serde_json::json;
use tracing::{error, info};

use crate::planner::{
    EntryObs, LookObs, Millis, OperatorStop, RemoteObs, RunnerEnd, SessionAction, SessionObs,
    Stage, look_again_in, plan_session,
};
use crate::store::SessionRecord;
pub(crate) use common::now_ms;

mod claim_keeper;
mod clock;
mod clone_repos;
mod deps;
mod finish;
mod launch;
mod leftovers;
mod no_room;
mod observe;
mod provision;
mod registry;
mod renew;
mod run;
mod snapshots;
mod start;
mod starting;
mod step;
mod wind_down;

use claim_keeper::ClaimKeeper;
pub(crate) use clock::local_now;
pub(crate) use deps::Deps;
#[cfg(test)]
pub(crate) use leftovers::UNANSWERED;
pub(crate) use leftovers::{ASKED_IF_OVER, GONE, ask_again_if_over};
pub use registry::OperatorStops;
use step::{RecordFailed, StepCtx};

/// Drives one held session: observes, asks the planner, does the step,
/// records the outcome.
pub(crate) struct SessionRunner {
    deps: Arc<Deps>,
    rec: SessionRecord,
    claim: ClaimKeeper,
    entry: Option<QueueEntry>,
    entry_obs: EntryObs,
    remote: RemoteObs,
    /// On the runner's clock ([`local_now`]), as are the other timers.
    remote_stopped_at: Option<Millis>,
    /// Where the remote starts, once known: the workdir for a workspace
    /// cloned here, else what [`crate::repos::LEGACY_PROBE`] found.
    remote_cwd: Option<String>,
    /// This runner killed the remote (see `kill_remote`).
    killed_remote: bool,
    suspended_since: Option<Millis>,
    /// Confirming reads in a row that said `suspended`.
    suspended_confirmations: u32,
    confirm_attempts: u32,
    last_confirm_at: Option<Millis>,
    operator_stop: Option<OperatorStop>,
    /// The network policy the sandbox is taken to have.
    applied_policy: Option<NetworkPolicy>,
    /// The stage of the last record written (the runner starts from one).
    recorded_stage: Stage,
    /// A record that failed during a slow step's renewals, for the step to
    /// stop on when it returns.
    failed_record: Option<RecordFailed>,
    /// Writing the session log failed at the last look (told once).
    output_stalled: bool,
}

impl SessionRunner {
    /// A runner for a fresh claim: `entry` is the claim response to the
    /// request sent at `sent`.
    pub(crate) fn claimed(
        deps: Arc<Deps>,
        rec: SessionRecord,
        entry: QueueEntry,
        sent: tokio::time::Instant,
    ) -> Self {
        let mut runner = Self::adopted(deps, rec);
        runner.claim.take_answer(&entry, sent);
        if let Some(token) = runner.claim.connect_token() {
            runner
                .deps
                .logs
                .redactor()
                .add_claim_token(runner.rec.session_id.as_str(), token.expose());
        }
        runner.entry_obs = EntryObs::Present(entry.status.session_status.clone());
        runner.note_entry(entry);
        runner
    }

    /// A runner for a session found in the state store (or adopted from the
    /// server's word that we hold it): no connect token in memory.
    pub(crate) fn adopted(deps: Arc<Deps>, rec: SessionRecord) -> Self {
        let claim = ClaimKeeper::new(
            rec.session_id.clone(),
            deps.client.clone(),
            &deps.acceptor_id,
            deps.learned_lifetime.clone(),
            deps.policy.clone(),
        );
        Self {
            deps,
            recorded_stage: rec.stage,
            failed_record: None,
            output_stalled: false,
            rec,
            claim,
            entry: None,
            entry_obs: EntryObs::Unknown,
            remote: RemoteObs::NotStarted,
            remote_stopped_at: None,
            remote_cwd: None,
            killed_remote: false,
            suspended_since: None,
            suspended_confirmations: 0,
            confirm_attempts: 0,
            last_confirm_at: None,
            operator_stop: None,
            applied_policy: None,
        }
    }

    fn id(&self) -> &str {
        self.rec.session_id.as_str()
    }

    /// The claim's gateway, else the configured one (Devin's orchestration
    /// docs: `--gateway-url` is for a claim that carries none).
    fn gateway_url(&self) -> Option<String> {
        self.claim
            .gateway_url()
            .map(str::to_owned)
            .or_else(|| self.deps.gateway_url.clone())
    }

    /// Drives the session until it is done, or until Garrison stops and the
    /// session may be left running.
    ///
    /// A step whose record cannot be written to the state store does not
    /// run: no sandbox is created, no remote started, no sandbox destroyed
    /// after a write failed. When the write failed for want of space and
    /// the session got past `claimed`, the runner waits for room instead
    /// (see `no_room.rs`): the session keeps running as it is, its claim
    /// renewed, and goes on once the record is written. Otherwise the
    /// runner stops at once, as a crash at
    /// that point would, leaving the session as its last written record
    /// describes for a Garrison with a working store to continue. The claim
    /// is released only when that record shows the session never got past
    /// `claimed` (no sandbox was made for it), so another acceptor can take
    /// it at once. Otherwise the claim is no longer renewed and is left to
    /// expire: a sandbox, and maybe a running remote, exist that only this
    /// store leads back to, and a release would let a second remote start
    /// beside ours. Either way this process does not claim the session
    /// again for a while ([`crate::planner::cooldown_until`]).
    pub(crate) async fn run(self) -> RunnerEnd {
        let logs = self.deps.logs.clone();
        let session_id = self.id().to_owned();
        let end = self.drive().await;
        // Nothing of the session is copied or logged here any more.
        logs.redactor().forget_session(&session_id);
        end
    }

    async fn drive(mut self) -> RunnerEnd {
        let mut changes = self.deps.view.subscribe_session(&self.rec.session_id);
        let mut registration = self.deps.operator_stops.register(&self.rec.session_id);
        let mut quiet_looks = 0u32;
        loop {
            let before = self.look_fingerprint();
            self.observe().await;
            if self.look_fingerprint() != before {
                quiet_looks = 0;
            }
            self.observe_operator(&mut registration.rx);
            let now = local_now();
            let action = plan_session(&self.observation(now), &self.deps.policy);
            if self.rec.stage.is_done() {
                return RunnerEnd::Stage(self.rec.stage);
            }
            let leave_running = self.deps.stopping.is_cancelled() && !self.deps.drain;
            if leave_running && matches!(self.rec.stage, Stage::Running) {
                info!(
                    session_id = self.id(),
                    "leaving the running session to the next Garrison"
                );
                return RunnerEnd::Stage(self.rec.stage);
            }
            let done = match action {
                SessionAction::Wait => {
                    let look = self.look_again_in(quiet_looks);
                    tokio::select! {
                        _ = tokio::time::sleep(look) => quiet_looks = quiet_looks.saturating_add(1),
                        _ = changes.changed() => quiet_looks = 0,
                        _ = registration.rx.changed() => quiet_looks = 0,
                        _ = self.deps.stopping.cancelled(), if !self.deps.stopping.is_cancelled() => {}
                    }
                    Ok(())
                }
                SessionAction::Renew => self.renew().await,
                SessionAction::Start => self.start().await,
                SessionAction::RestartRemote => self.restart_remote().await,
                SessionAction::KillRemote => {
                    self.kill_remote().await;
                    Ok(())
                }
                SessionAction::ConfirmEnd => {
                    self.confirm_end().await;
                    Ok(())
                }
                SessionAction::Finish(finish) => self.finish(finish).await,
                SessionAction::UpdateNetworkPolicy => {
                    self.update_network_policy().await;
                    Ok(())
                }
            };
            if !matches!(action, SessionAction::Wait) {
                quiet_looks = 0;
            }
            if let Err(failed) = done
                && let Err(failed) = self.wait_for_room(failed).await
            {
                return self.halt(failed).await;
            }
        }
    }

    /// What a look can find new: a change resets the runner's cadence.
    fn look_fingerprint(&self) -> (RemoteObs, u64, EntryObs, Stage) {
        (
            self.remote,
            self.rec.output_offset,
            self.entry_obs.clone(),
            self.rec.stage,
        )
    }

    /// How long a runner with nothing to do waits before looking again
    /// (see [`look_again_in`]).
    fn look_again_in(&self, quiet_looks: u32) -> Duration {
        let ms = look_again_in(&LookObs {
            stage: self.rec.stage,
            remote: self.remote,
            entry: self.entry_obs.clone(),
            operator_stop: self.operator_stop.is_some(),
            quiet_looks,
            renewal_due_in_ms: self.claim.due_in().as_millis() as Millis,
        });
        Duration::from_millis(ms.max(0) as u64)
    }

    /// Ends the runner after a failed record (see [`Self::run`]).
    async fn halt(&mut self, failed: RecordFailed) -> RunnerEnd {
        let never_started = self.never_started();
        error!(
            session_id = self.id(),
            error = %failed,
            release = never_started,
            "a step could not be recorded; it does not run and this runner stops"
        );
        // The store is what failed: this reaches the session log at most.
        self.event(
            "record_failed",
            json!({ "error": format!("{failed}"), "release": never_started }),
        );
        if never_started {
            self.release().await;
        }
        RunnerEnd::RecordFailed
    }

    /// The last record shows the session never got past `claimed`: no
    /// sandbox was made for it.
    fn never_started(&self) -> bool {
        self.recorded_stage == Stage::Claimed && self.rec.handle.is_none()
    }

    fn observation(&self, now: Millis) -> SessionObs {
        // The claim's times are kept on the monotonic clock; the planner
        // sees them on `now`'s.
        let at = tokio::time::Instant::now();
        SessionObs {
            now,
            stage: self.rec.stage,
            claim_deadline: self.claim.expires_at(now, at),
            claim_lifetime_ms: self.claim.lifetime(),
            last_renewal_at: self.claim.last_attempt_at(now, at),
            has_connect_token: self.claim.connect_token().is_some(),
            entry: self.entry_obs.clone(),
            remote: self.remote,
            remote_stopped_at: self.remote_stopped_at,
            suspended_since: self.suspended_since,
            suspended_confirmations: self.suspended_confirmations,
            restarts: self.rec.restarts,
            start_failures: self.rec.start_failures,
            confirm_attempts: self.confirm_attempts,
            last_confirm_at: self.last_confirm_at,
            stopping: self.deps.stopping.is_cancelled(),
            operator_stop: self.operator_stop,
            has_sandbox: self.rec.handle.is_some(),
            network_policy: self.entry.as_ref().map(|e| e.spec.network_policy.clone()),
            applied_policy: self.applied_policy.clone(),
        }
    }

    /// Writes the session's record; the caller must not go on to the step
    /// it records when this fails.
    fn save(&mut self) -> Result<(), RecordFailed> {
        self.rec.updated_at = now_ms();
        self.deps
            .store
            .put_session(&self.rec)
            .map_err(RecordFailed)?;
        self.recorded_stage = self.rec.stage;
        Ok(())
    }

    fn set_stage(&mut self, stage: Stage) -> Result<(), RecordFailed> {
        self.rec.stage = stage;
        self.save()
    }

    /// What the step functions need of the runner's dependencies.
    fn ctx(&self) -> StepCtx {
        StepCtx::new(&self.deps, self.rec.session_id.clone())
    }

    /// Adds to the session's history (see [`StepCtx::event`]).
    fn event(&self, kind: &str, detail: serde_json::Value) {
        self.ctx().event(kind, detail);
    }

    async fn pause(&self, duration: Duration) {
        self.ctx().pause(duration).await;
    }
}

#[cfg(test)]
mod tests;
