//! The executor for one held session.
//!
//! A [`SessionRunner`] observes (the queue view, the remote's status, the
//! remote's output), asks [`plan_session`] what to do, does it, writes the
//! outcome down, and repeats until the session is done or Garrison stops.
//! Each step is recorded before it starts, so a runner created from the
//! state store after a crash continues where the last one stopped.

use std::sync::Arc;
use std::time::Duration;

use fleet::{FleetClient, NetworkPolicy, QueueEntry};
use sandbox::Sandbox;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::OutpostConfig;
use crate::metrics::Metrics;
use crate::planner::{
    EntryObs, Millis, OperatorStop, Policy, RemoteObs, SessionAction, SessionObs, Stage,
    plan_session,
};
use crate::queue::QueueView;
use crate::remote::RemoteResolver;
use crate::session_log::SessionLogs;
use crate::store::{SessionRecord, Store};

mod claim;
mod clone_repos;
mod finish;
mod observe;
mod provision;
mod registry;
mod run;
mod start;

pub use registry::OperatorStops;

use claim::keep_claim_alive;
use claim::{Claim, lifetime_of};
use start::StartError;

/// How often a running session is looked at when nothing wakes it.
const POLL: Duration = Duration::from_millis(100);
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Everything a runner needs, shared by all runners of an outpost.
pub struct Deps {
    pub client: FleetClient,
    pub backend: Arc<dyn Sandbox>,
    pub store: Arc<Store>,
    pub resolver: Arc<RemoteResolver>,
    pub view: Arc<QueueView>,
    pub logs: SessionLogs,
    pub metrics: Arc<Metrics>,
    pub acceptor_id: String,
    pub outpost: OutpostConfig,
    pub policy: Policy,
    /// Set when Garrison is shutting down.
    pub stopping: CancellationToken,
    /// With `stopping`: keep serving running sessions until they end.
    pub drain: bool,
    /// Where operator requests reach the runners (shared by all outposts).
    pub operator_stops: Arc<OperatorStops>,
}

pub fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

pub struct SessionRunner {
    deps: Arc<Deps>,
    rec: SessionRecord,
    claim: Claim,
    entry: Option<QueueEntry>,
    entry_obs: EntryObs,
    remote: RemoteObs,
    remote_stopped_at: Option<Millis>,
    suspended_since: Option<Millis>,
    confirm_attempts: u32,
    last_confirm_at: Option<Millis>,
    operator_stop: Option<OperatorStop>,
    /// The network policy the sandbox is taken to have.
    applied_policy: Option<NetworkPolicy>,
}

impl SessionRunner {
    /// A runner for a fresh claim: `entry` is the claim response.
    pub fn claimed(deps: Arc<Deps>, rec: SessionRecord, entry: QueueEntry) -> Self {
        let claim = Claim {
            connect_token: entry.status.connect_token.clone(),
            gateway_url: entry.status.gateway_url.clone(),
            lifetime_ms: lifetime_of(&entry),
        };
        if let Some(token) = &claim.connect_token {
            deps.logs.redactor().add(token.expose());
        }
        let mut runner = Self::adopted(deps, rec);
        runner.claim = claim;
        runner.entry_obs = EntryObs::Present(entry.status.session_status.clone());
        runner.note_entry(entry);
        runner
    }

    /// A runner for a session found in the state store (or adopted from the
    /// server's word that we hold it): no connect token in memory.
    pub fn adopted(deps: Arc<Deps>, rec: SessionRecord) -> Self {
        Self {
            deps,
            rec,
            claim: Claim::default(),
            entry: None,
            entry_obs: EntryObs::Unknown,
            remote: RemoteObs::NotStarted,
            remote_stopped_at: None,
            suspended_since: None,
            confirm_attempts: 0,
            last_confirm_at: None,
            operator_stop: None,
            applied_policy: None,
        }
    }

    fn id(&self) -> &str {
        &self.rec.session_id
    }

    /// Drives the session until it is done, or until Garrison stops and the
    /// session may be left running.
    pub async fn run(mut self) -> Stage {
        let mut changes = self.deps.view.subscribe();
        let mut registration = self.deps.operator_stops.register(self.id());
        loop {
            self.observe().await;
            self.observe_operator(&mut registration.rx);
            let now = now_ms();
            let action = plan_session(&self.observation(now), &self.deps.policy);
            if self.rec.stage.is_done() {
                return self.rec.stage;
            }
            let leave_running = self.deps.stopping.is_cancelled() && !self.deps.drain;
            if leave_running && matches!(self.rec.stage, Stage::Running) {
                info!(
                    session_id = self.id(),
                    "leaving the running session to the next Garrison"
                );
                return self.rec.stage;
            }
            match action {
                SessionAction::Wait => {
                    tokio::select! {
                        _ = tokio::time::sleep(POLL) => {}
                        _ = changes.changed() => {}
                        _ = registration.rx.changed() => {}
                        _ = self.deps.stopping.cancelled(), if !self.deps.stopping.is_cancelled() => {}
                    }
                }
                SessionAction::Renew => self.renew().await,
                SessionAction::Start => self.start().await,
                SessionAction::RestartRemote => self.restart_remote().await,
                SessionAction::KillRemote => self.kill_remote().await,
                SessionAction::ConfirmEnd => self.confirm_end().await,
                SessionAction::Finish(finish) => self.finish(finish).await,
                SessionAction::UpdateNetworkPolicy => self.update_network_policy().await,
            }
        }
    }

    fn observation(&self, now: Millis) -> SessionObs {
        SessionObs {
            now,
            stage: self.rec.stage,
            claim_deadline: self.rec.claim_deadline,
            claim_lifetime_ms: self.claim.lifetime_ms,
            has_connect_token: self.claim.connect_token.is_some(),
            entry: self.entry_obs.clone(),
            remote: self.remote,
            remote_stopped_at: self.remote_stopped_at,
            suspended_since: self.suspended_since,
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

    fn save(&mut self) {
        self.rec.updated_at = now_ms();
        if let Err(e) = self.deps.store.put_session(&self.rec) {
            error!(session_id = self.id(), error = %e, "recording the session failed");
        }
    }

    fn set_stage(&mut self, stage: Stage) {
        self.rec.stage = stage;
        self.save();
    }

    fn event(&self, kind: &str, detail: serde_json::Value) {
        let at = now_ms();
        if let Err(e) = self.deps.store.add_event(self.id(), at, kind, &detail) {
            warn!(session_id = self.id(), error = %e, "recording an event failed");
        }
        let _ = self.deps.logs.event(self.id(), at, kind, &detail);
    }

    async fn pause(&self, duration: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = self.deps.stopping.cancelled(), if !self.deps.stopping.is_cancelled() => {}
        }
    }
}
