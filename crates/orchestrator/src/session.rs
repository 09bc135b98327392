//! The executor for one held session.
//!
//! A [`SessionRunner`] observes (the queue view, the remote's status, the
//! remote's output), asks [`plan_session`] what to do, does it, writes the
//! outcome down, and repeats until the session is done or Garrison stops.
//! Each step is recorded before it starts, so a runner created from the
//! state store after a crash continues where the last one stopped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow};
use fleet::{ClaimError, FleetClient, QueueEntry, ReleaseOutcome, Secret};
use sandbox::{
    Handle, ProcessRef, ProcessSpec, ProcessStatus, Sandbox, SandboxName, SandboxSpec, SnapshotRef,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::OutpostConfig;
use crate::contract::{self, RemoteLaunch};
use crate::metrics::Metrics;
use crate::planner::{
    EntryObs, Finish, Millis, OperatorStop, Policy, RemoteObs, SessionAction, SessionObs, Stage,
    plan_session, track_suspended,
};
use crate::queue::QueueView;
use crate::remote::RemoteResolver;
use crate::session_log::SessionLogs;
use crate::store::{SessionRecord, SnapshotReason, Store, StoredSnapshot};

mod clone_repos;

/// How often a running session is looked at when nothing wakes it.
const POLL: Duration = Duration::from_millis(100);
/// A slow step is not begun with less claim time left than this.
const MIN_STEP_BUDGET_MS: Millis = 10_000;
const KILL_GRACE: Duration = Duration::from_secs(10);
/// Output copied per read.
const OUTPUT_CHUNK: usize = 256 * 1024;
/// Attempts of a release or a snapshot before giving up on it.
const FINISH_ATTEMPTS: u32 = 5;

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

/// A registered runner: its generation and where its requests go.
type RunnerSlot = (u64, tokio::sync::watch::Sender<Option<OperatorStop>>);

/// The runners that are running now, by session id, and a way to hand each
/// an operator's request (`garrison terminate`). A runner registers itself
/// for as long as [`SessionRunner::run`] runs.
#[derive(Default)]
pub struct OperatorStops {
    runners: Mutex<BTreeMap<String, RunnerSlot>>,
    next: std::sync::atomic::AtomicU64,
}

impl OperatorStops {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, RunnerSlot>> {
        self.runners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn register(self: &Arc<Self>, session_id: &str) -> Registration {
        let generation = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = tokio::sync::watch::channel(None);
        self.lock().insert(session_id.to_owned(), (generation, tx));
        Registration {
            stops: self.clone(),
            session_id: session_id.to_owned(),
            generation,
            rx,
        }
    }

    /// Hands the request to the session's runner; `false` when no runner
    /// runs for it.
    pub fn request(&self, session_id: &str, stop: OperatorStop) -> bool {
        match self.lock().get(session_id) {
            Some((_, tx)) => {
                tx.send_replace(Some(stop));
                true
            }
            None => false,
        }
    }

    /// Whether a runner runs for the session now.
    pub fn is_running(&self, session_id: &str) -> bool {
        self.lock().contains_key(session_id)
    }
}

/// A runner's entry in [`OperatorStops`], removed when dropped.
struct Registration {
    stops: Arc<OperatorStops>,
    session_id: String,
    generation: u64,
    rx: tokio::sync::watch::Receiver<Option<OperatorStop>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut runners = self.stops.lock();
        if runners
            .get(&self.session_id)
            .is_some_and(|(generation, _)| *generation == self.generation)
        {
            runners.remove(&self.session_id);
        }
    }
}

pub fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// The claim-time state of a session, kept in memory only.
#[derive(Default)]
struct Claim {
    connect_token: Option<Secret>,
    gateway_url: Option<String>,
    lifetime_ms: Option<Millis>,
}

fn lifetime_of(entry: &QueueEntry) -> Option<Millis> {
    entry
        .status
        .claim_deadline
        .map(|d| d.unix_millis() - now_ms())
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
        runner.entry = Some(entry);
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
        }
    }

    /// Takes in an operator's request (the first one counts).
    fn observe_operator(&mut self, rx: &mut tokio::sync::watch::Receiver<Option<OperatorStop>>) {
        if self.operator_stop.is_some() {
            return;
        }
        let requested = *rx.borrow_and_update();
        if let Some(stop) = requested {
            info!(
                session_id = self.id(),
                keep_snapshot = stop.keep_snapshot,
                "the operator asked to terminate the session"
            );
            self.operator_stop = Some(stop);
            self.event(
                "operator_terminate",
                json!({ "keep_snapshot": stop.keep_snapshot, "stage": crate::store::stage_label(&self.rec.stage) }),
            );
        }
    }

    async fn observe(&mut self) {
        let now = now_ms();
        match self.deps.view.get(self.id()) {
            Some(entry) => {
                let policy_changed = self
                    .entry
                    .as_ref()
                    .is_some_and(|old| old.spec.network_policy != entry.spec.network_policy);
                self.entry_obs = EntryObs::Present(entry.status.session_status.clone());
                if policy_changed && let Some(handle) = self.rec.handle.clone() {
                    let policy = &entry.spec.network_policy;
                    match self
                        .deps
                        .backend
                        .update_network_policy(&handle, policy)
                        .await
                    {
                        Ok(()) => self.event(
                            "network_policy_updated",
                            json!({ "enabled": policy.enabled, "rules": policy.allow.len() }),
                        ),
                        Err(e) => {
                            warn!(session_id = self.id(), error = %e, "applying the changed network policy failed")
                        }
                    }
                }
                self.entry = Some(entry);
            }
            // Absent from a synced view: the entry left the queue. Before the
            // first list, absence means nothing yet.
            None if self.deps.view.is_synced() && self.entry_obs != EntryObs::Unknown => {
                self.entry_obs = EntryObs::Gone;
            }
            None if self.deps.view.is_synced() && self.rec.stage == Stage::Running => {
                self.entry_obs = EntryObs::Gone;
            }
            None => {}
        }
        self.suspended_since = track_suspended(self.suspended_since, &self.entry_obs, now);

        if let (Some(handle), Some(process)) = (self.rec.handle.clone(), self.rec.process.clone()) {
            let status = match self.deps.backend.status(&handle, &process).await {
                Ok(ProcessStatus::Running) => RemoteObs::Running,
                Ok(ProcessStatus::Exited(code)) => RemoteObs::Exited(code),
                Ok(ProcessStatus::Lost) => RemoteObs::Lost,
                Err(e) if e.is_gone() => RemoteObs::Lost,
                Err(e) => {
                    warn!(session_id = self.id(), error = %e, "reading the remote's status failed");
                    self.remote
                }
            };
            let was_live = matches!(self.remote, RemoteObs::Running | RemoteObs::NotStarted);
            let is_live = matches!(status, RemoteObs::Running | RemoteObs::NotStarted);
            if was_live && !is_live {
                self.remote_stopped_at = Some(now);
                self.event("remote_exited", json!({ "status": format!("{status:?}") }));
            }
            self.remote = status;
            self.copy_output(&handle, &process).await;
        } else {
            self.remote = RemoteObs::NotStarted;
        }
    }

    async fn copy_output(&mut self, handle: &Handle, process: &ProcessRef) {
        loop {
            let chunk = match self
                .deps
                .backend
                .read_output(handle, process, self.rec.output_offset, OUTPUT_CHUNK)
                .await
            {
                Ok(chunk) => chunk,
                Err(_) => return,
            };
            if chunk.data.is_empty() {
                return;
            }
            if let Err(e) = self.deps.logs.remote_output(self.id(), &chunk.data) {
                warn!(session_id = self.id(), error = %e, "writing the session log failed");
                return;
            }
            self.rec.output_offset = chunk.next_offset;
            self.save();
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

    /// Time left on the claim; `None` when no deadline is known.
    fn claim_time_left(&self) -> Option<Millis> {
        self.rec.claim_deadline.map(|d| d - now_ms())
    }

    /// How long until the claim must be renewed (see the planner's margin).
    fn renewal_due_in(&self) -> Duration {
        let Some(deadline) = self.rec.claim_deadline else {
            return Duration::from_secs(1);
        };
        let margin = match self.claim.lifetime_ms {
            Some(lifetime) if lifetime > 0 => self.deps.policy.renew_margin_ms.min(lifetime / 2),
            _ => self.deps.policy.renew_margin_ms,
        };
        Duration::from_millis((deadline - margin - now_ms()).max(0) as u64)
    }

    fn has_budget(&self) -> bool {
        self.claim_time_left()
            .is_none_or(|left| left >= MIN_STEP_BUDGET_MS)
    }

    async fn renew(&mut self) {
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
                self.entry = Some(entry);
                self.save();
                self.event(
                    "claim_renewed",
                    json!({ "claim_deadline": self.rec.claim_deadline }),
                );
            }
            Err(ClaimError::Conflict) => {
                // Someone else holds the session now: our remote must not run
                // beside theirs. Keep the work, give nothing back.
                warn!(
                    session_id = self.id(),
                    "the claim was lost to another acceptor"
                );
                self.event("claim_lost", json!({}));
                let finish = if self.rec.stage.may_have_sandbox() {
                    Finish::Vanished
                } else {
                    Finish::Released
                };
                self.set_stage(Stage::Finishing(finish));
                if let (Some(handle), Some(process)) =
                    (self.rec.handle.clone(), self.rec.process.clone())
                {
                    let _ = self.deps.backend.kill(&handle, &process, KILL_GRACE).await;
                }
            }
            Err(ClaimError::Fleet(e)) => {
                warn!(session_id = self.id(), error = %e, "renewing the claim failed; retrying");
                self.pause(Duration::from_secs(1)).await;
            }
        }
    }

    async fn pause(&self, duration: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(duration) => {}
            _ = self.deps.stopping.cancelled(), if !self.deps.stopping.is_cancelled() => {}
        }
    }

    /// The entry as claimed (for its pinned SHA and network policy).
    async fn current_entry(&mut self) -> anyhow::Result<QueueEntry> {
        if let Some(entry) = &self.entry {
            return Ok(entry.clone());
        }
        let entry = self
            .deps
            .client
            .get(self.id())
            .await?
            .context("the entry is gone")?;
        self.entry = Some(entry.clone());
        Ok(entry)
    }

    async fn start(&mut self) {
        let started = std::time::Instant::now();
        match self.try_start().await {
            Ok(()) => {
                self.deps
                    .metrics
                    .record_sandbox_start(started.elapsed().as_secs_f64() * 1000.0);
            }
            Err(StartError::Refused(reason)) => {
                error!(
                    session_id = self.id(),
                    reason, "refusing to start the session"
                );
                self.rec.error = Some(reason.clone());
                self.event("start_refused", json!({ "reason": reason }));
                self.set_stage(Stage::Finishing(Finish::Released));
            }
            Err(StartError::Deadline) => {
                // The planner renews next; nothing failed.
            }
            Err(StartError::Failed(e)) => {
                self.rec.start_failures += 1;
                let message = self.deps.logs.redactor().scrub(&format!("{e:#}"));
                warn!(session_id = self.id(), attempt = self.rec.start_failures, error = %message, "starting the session failed");
                self.rec.error = Some(message.clone());
                self.event(
                    "start_failed",
                    json!({ "error": message, "attempt": self.rec.start_failures }),
                );
                self.save();
                self.pause(Duration::from_secs(1)).await;
            }
        }
    }

    async fn try_start(&mut self) -> Result<(), StartError> {
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        let entry = self.current_entry().await.map_err(StartError::Failed)?;
        let pinned = entry.spec.remote_binary_sha.clone();
        let remote = match self.deps.resolver.resolve(pinned.as_deref()).await {
            Ok(remote) => remote,
            Err(e) if e.is_checksum_mismatch() => {
                Metrics::inc(&self.deps.metrics.checksum_refusals);
                return Err(StartError::Refused(e.to_string()));
            }
            Err(e) => return Err(StartError::Failed(e.into())),
        };
        self.rec.remote_sha = Some(remote.sha.clone());
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }

        if self.rec.stage == Stage::Claimed {
            self.set_stage(Stage::Starting);
            self.event(
                "starting",
                json!({ "remote_sha": remote.sha, "backend": self.deps.backend.kind() }),
            );
        }
        let name = SandboxName::for_session(self.id());
        let kept = match self.find_sandbox(&name).await.map_err(StartError::Failed)? {
            Some(found) => self.resume_kept(found).await.map_err(StartError::Failed)?,
            None => None,
        };
        let (handle, restored) = match kept {
            Some(handle) => (handle, true),
            None => self.create_sandbox(&name, &entry).await?,
        };
        self.rec.handle = Some(handle.clone());
        self.save();
        self.event("sandbox_created", json!({ "sandbox": handle.name }));

        let bytes = self
            .deps
            .resolver
            .verified_bytes(&remote)
            .await
            .map_err(|e| {
                if e.is_checksum_mismatch() {
                    StartError::Refused(e.to_string())
                } else {
                    StartError::Failed(e.into())
                }
            })?;
        let path = format!("{}/{}", handle.bin_dir, contract::REMOTE_BINARY);
        self.deps
            .backend
            .put_file(&handle, &path, &bytes, 0o755)
            .await
            .map_err(|e| StartError::Failed(e.into()))?;
        // A restored or resumed workspace has its repositories already.
        if !restored {
            self.clone_repos(&handle).await?;
        }
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        self.spawn_remote().await.map_err(StartError::Failed)
    }

    /// The sandbox this resume claim's session was suspended in, running
    /// again, on a backend whose suspend keeps memory. Any other sandbox
    /// found under the session's name is left by an interrupted start and
    /// never ran a remote (the process is recorded before it is spawned):
    /// it is destroyed, to start over cleanly.
    async fn resume_kept(&mut self, found: Handle) -> anyhow::Result<Option<Handle>> {
        let backend = self.deps.backend.clone();
        if self.rec.kind == "resume"
            && self.rec.process.is_none()
            && backend.capabilities().suspend_keeps_memory
        {
            match backend.resume(&found).await {
                Ok(()) => {
                    info!(
                        session_id = self.id(),
                        sandbox = found.name,
                        "resumed the suspended sandbox"
                    );
                    self.event("sandbox_resumed", json!({ "sandbox": found.name }));
                    return Ok(Some(found));
                }
                Err(e) if e.is_gone() => {
                    warn!(
                        session_id = self.id(),
                        "the suspended sandbox is gone; restoring from the snapshot"
                    );
                    return Ok(None);
                }
                // A passing failure must not cost the kept memory: this
                // start fails and is tried again, the sandbox kept.
                Err(e) if e.is_transient() => return Err(e.into()),
                Err(e) => {
                    warn!(session_id = self.id(), error = %e, "resuming the suspended sandbox failed; restoring from the snapshot");
                }
            }
        }
        backend.destroy(&found).await?;
        Ok(None)
    }

    /// A new sandbox, restored from the newest snapshot when there is one
    /// (a fresh one if that snapshot is gone); whether it was restored.
    async fn create_sandbox(
        &mut self,
        name: &SandboxName,
        entry: &QueueEntry,
    ) -> Result<(Handle, bool), StartError> {
        let name = name.clone();
        let restore = self.latest_snapshot(&name).await;
        let mut spec = SandboxSpec {
            name: name.clone(),
            labels: {
                let mut labels = sandbox::session_labels(self.id(), &self.rec.outpost_id);
                labels.insert(
                    sandbox::LABEL_ACCEPTOR_ID.to_owned(),
                    self.deps.acceptor_id.clone(),
                );
                labels
            },
            image: self.deps.outpost.image.clone(),
            restore_from: restore.clone(),
            resources: self.deps.outpost.resources,
            network: sandbox::NetworkSpec {
                policy: entry.spec.network_policy.clone(),
                gateway_url: self.claim.gateway_url.clone(),
            },
        };
        let handle = match self.deps.backend.create(&spec).await {
            Err(e) if e.is_gone() && restore.is_some() => {
                warn!(
                    session_id = self.id(),
                    "the snapshot to resume from is gone; starting a fresh sandbox"
                );
                self.event("snapshot_missing", json!({}));
                spec.restore_from = None;
                self.deps.backend.create(&spec).await
            }
            other => other,
        }
        .map_err(|e| StartError::Failed(e.into()))?;
        if let Some(snapshot) = &spec.restore_from {
            self.event(
                "restored",
                json!({ "snapshot": snapshot.id, "bytes": snapshot.size_bytes }),
            );
        }
        Ok((handle, spec.restore_from.is_some()))
    }

    async fn find_sandbox(&self, name: &SandboxName) -> anyhow::Result<Option<Handle>> {
        if let Some(handle) = &self.rec.handle {
            return Ok(Some(handle.clone()));
        }
        Ok(self
            .deps
            .backend
            .list()
            .await?
            .into_iter()
            .find(|h| h.name == name.as_str()))
    }

    /// The newest snapshot of the session, from the state store or, for a
    /// session another Garrison suspended, from the backend's shared store.
    async fn latest_snapshot(&self, name: &SandboxName) -> Option<SnapshotRef> {
        for snapshot in self.known_snapshots(name).await.into_iter().rev() {
            if self
                .deps
                .backend
                .snapshot_exists(&snapshot)
                .await
                .unwrap_or(false)
            {
                return Some(snapshot);
            }
        }
        if self.rec.kind == "resume" {
            warn!(
                session_id = self.id(),
                "no snapshot to resume from; starting a fresh sandbox"
            );
            self.event("snapshot_missing", json!({}));
        }
        None
    }

    /// Starts a remote in the existing sandbox, recording its name first.
    async fn spawn_remote(&mut self) -> anyhow::Result<()> {
        let handle = self
            .rec
            .handle
            .clone()
            .context("no sandbox to start the remote in")?;
        let token = self
            .claim
            .connect_token
            .clone()
            .context("no connect token")?;
        let gateway_url = self
            .claim
            .gateway_url
            .clone()
            .context("the claim gave no gateway URL")?;
        // A sandbox may see the host under another address than loopback.
        let gateway_url = self.deps.backend.gateway_url_for(&handle, &gateway_url);
        let name = format!("remote-{}", now_ms());
        let env = contract::remote_env(&RemoteLaunch {
            gateway_url: &gateway_url,
            connect_token: &token,
            session_id: self.id(),
            state_dir: &handle.state_dir,
            home: &handle.home,
            user: &current_user(),
            chrome_path: None,
            desktop: false,
        });
        let spec = ProcessSpec {
            name: name.clone(),
            argv: contract::remote_argv(&handle.bin_dir),
            env,
            cwd: handle.workdir.clone(),
        };
        self.rec.process = Some(ProcessRef { id: name.clone() });
        self.rec.output_offset = 0;
        self.set_stage(Stage::Running);
        self.deps
            .backend
            .spawn(&handle, &spec)
            .await
            .map_err(|e| anyhow!(e))?;
        self.remote = RemoteObs::Running;
        self.remote_stopped_at = None;
        Metrics::inc(&self.deps.metrics.remotes_started);
        if self.rec.running_at.is_none() {
            self.rec.running_at = Some(now_ms());
            if let Some(created) = self.entry.as_ref().and_then(|e| e.metadata.created_at) {
                let latency = (now_ms() - created.unix_millis()).max(0) as f64;
                self.deps.metrics.record_queue_to_running(latency);
            }
        }
        self.save();
        info!(session_id = self.id(), process = name, "remote started");
        self.event(
            "remote_started",
            json!({ "process": name, "remote_sha": self.rec.remote_sha }),
        );
        Ok(())
    }

    async fn restart_remote(&mut self) {
        if matches!(self.remote, RemoteObs::Exited(_) | RemoteObs::Lost) {
            self.rec.restarts += 1;
            Metrics::inc(&self.deps.metrics.remote_restarts);
            self.event(
                "remote_restart",
                json!({ "restart": self.rec.restarts, "previous": format!("{:?}", self.remote) }),
            );
        }
        if let Err(e) = self.spawn_remote().await {
            warn!(session_id = self.id(), error = %e, "restarting the remote failed");
            self.remote = RemoteObs::Lost;
            self.remote_stopped_at = Some(now_ms());
            self.pause(Duration::from_secs(1)).await;
        }
    }

    async fn kill_remote(&mut self) {
        if let (Some(handle), Some(process)) = (self.rec.handle.clone(), self.rec.process.clone()) {
            self.event(
                "remote_kill",
                json!({ "entry": format!("{:?}", self.entry_obs) }),
            );
            if let Err(e) = self.deps.backend.kill(&handle, &process, KILL_GRACE).await {
                warn!(session_id = self.id(), error = %e, "stopping the remote failed");
                self.pause(Duration::from_secs(1)).await;
            }
        }
    }

    async fn confirm_end(&mut self) {
        self.confirm_attempts += 1;
        self.last_confirm_at = Some(now_ms());
        match self.deps.client.get(self.id()).await {
            Ok(Some(entry)) => {
                self.entry_obs = EntryObs::Present(entry.status.session_status.clone());
                self.deps.view.upsert(entry.clone());
                self.entry = Some(entry);
            }
            Ok(None) => self.entry_obs = EntryObs::Gone,
            Err(e) => warn!(session_id = self.id(), error = %e, "reading the final status failed"),
        }
    }

    async fn finish(&mut self, finish: Finish) {
        if self.rec.stage != Stage::Finishing(finish) {
            self.set_stage(Stage::Finishing(finish));
            self.event("finishing", json!({ "finish": finish }));
        }
        if let Err(e) = self.wind_down(finish).await {
            let message = format!("{e:#}");
            error!(session_id = self.id(), finish = ?finish, error = %message, "finishing the session failed; retrying");
            self.event("finish_failed", json!({ "error": message }));
            self.pause(Duration::from_secs(2)).await;
            return;
        }
        let done = match finish {
            Finish::Failed => {
                error!(session_id = self.id(), error = ?self.rec.error, "session failed; a recovery snapshot was kept where possible");
                Finish::Failed
            }
            other => other,
        };
        Metrics::inc(&self.deps.metrics.sessions_finished);
        // The event before the stage: whoever sees the stage final (status
        // commands, `logs -f`, the dashboard) finds the whole history.
        self.event("done", json!({ "finish": done }));
        self.set_stage(Stage::Done(done));
        info!(session_id = self.id(), finish = ?done, "session done");
    }

    async fn wind_down(&mut self, finish: Finish) -> anyhow::Result<()> {
        let backend = self.deps.backend.clone();
        if let Some(handle) = self.rec.handle.clone() {
            if let Some(process) = self.rec.process.clone() {
                backend
                    .kill(&handle, &process, KILL_GRACE)
                    .await
                    .map_err(|e| anyhow!(e))?;
                self.copy_output(&handle, &process).await;
            }
            let keep = match finish {
                Finish::Suspended | Finish::Vanished => Some(SnapshotReason::Suspend),
                Finish::Failed => Some(SnapshotReason::Recovery),
                // Only a sandbox a remote ran in holds work worth keeping (a
                // half-made one would shadow the snapshot it came from).
                Finish::Stopped {
                    keep_snapshot: true,
                } if self.rec.process.is_some() => Some(SnapshotReason::Operator),
                Finish::Terminated | Finish::Released | Finish::Stopped { .. } => None,
            };
            if let Some(reason) = keep {
                self.snapshot(&handle, reason).await?;
            }
            // Where suspending keeps memory the sandbox itself waits for
            // the resume claim (the snapshot is the fallback).
            if finish == Finish::Suspended && self.suspend_kept(&handle).await {
                self.event("sandbox_suspended", json!({ "sandbox": handle.name }));
            } else {
                backend.destroy(&handle).await.map_err(|e| anyhow!(e))?;
                self.event("sandbox_destroyed", json!({}));
            }
            self.rec.handle = None;
            self.rec.process = None;
            self.save();
        }
        if matches!(
            finish,
            Finish::Terminated
                | Finish::Stopped {
                    keep_snapshot: false
                }
        ) {
            self.delete_snapshots().await;
        }
        if finish != Finish::Vanished {
            self.release().await;
        }
        Ok(())
    }

    /// Suspends the sandbox if the backend keeps memory; false when it
    /// cannot (the caller destroys it, the snapshot remains).
    async fn suspend_kept(&self, handle: &Handle) -> bool {
        if !self.deps.backend.capabilities().suspend_keeps_memory {
            return false;
        }
        match self.deps.backend.suspend(handle).await {
            Ok(()) => true,
            Err(e) => {
                warn!(session_id = self.id(), error = %e, "suspending the sandbox failed; destroying it (the snapshot remains)");
                false
            }
        }
    }

    async fn snapshot(&mut self, handle: &Handle, reason: SnapshotReason) -> anyhow::Result<()> {
        let mut last_error = None;
        for attempt in 1..=FINISH_ATTEMPTS {
            let started = std::time::Instant::now();
            let backend = self.deps.backend.clone();
            let taken = handle.clone();
            let step = async move { backend.snapshot(&taken).await };
            // A large workspace can take longer than the claim lasts.
            let result = keep_claim_alive(
                self,
                step,
                SessionRunner::renewal_due_in,
                async |runner: &mut SessionRunner| runner.renew().await,
            )
            .await;
            match result {
                Ok(snapshot) => {
                    self.deps.metrics.record_snapshot(
                        started.elapsed().as_secs_f64() * 1000.0,
                        snapshot.size_bytes,
                    );
                    self.deps.store.add_snapshot(&StoredSnapshot {
                        session_id: self.id().to_owned(),
                        reason,
                        snapshot: snapshot.clone(),
                    })?;
                    self.event("snapshot", json!({ "snapshot": snapshot.id, "bytes": snapshot.size_bytes, "reason": reason }));
                    return Ok(());
                }
                Err(e) if e.is_transient() => {
                    warn!(session_id = self.id(), attempt, error = %e, "snapshot failed; retrying");
                    last_error = Some(anyhow!(e));
                    self.pause(Duration::from_secs(attempt as u64)).await;
                }
                // Without a snapshot the sandbox must not be destroyed: the
                // error keeps the session in `finishing` for the operator.
                Err(e) => return Err(anyhow!(e).context("snapshot")),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("snapshot failed")))
    }

    /// The session's snapshots recorded here and those the backend finds by
    /// name (another Garrison sharing the snapshot store may have made
    /// them), oldest first, each once.
    async fn known_snapshots(&self, name: &SandboxName) -> Vec<SnapshotRef> {
        let mut snapshots: Vec<SnapshotRef> = self
            .deps
            .store
            .snapshots(self.id())
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.snapshot)
            .collect();
        snapshots.extend(
            self.deps
                .backend
                .snapshots_for(name)
                .await
                .unwrap_or_default(),
        );
        snapshots.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        snapshots.dedup_by(|a, b| a.id == b.id);
        snapshots
    }

    async fn delete_snapshots(&self) {
        let name = SandboxName::for_session(self.id());
        for snapshot in self.known_snapshots(&name).await {
            match self.deps.backend.delete_snapshot(&snapshot).await {
                Ok(()) => {
                    let _ = self.deps.store.remove_snapshot(&snapshot.id);
                }
                Err(e) => {
                    warn!(session_id = self.id(), snapshot = snapshot.id, error = %e, "deleting a snapshot failed")
                }
            }
        }
    }

    async fn release(&self) {
        for attempt in 1..=FINISH_ATTEMPTS {
            match self
                .deps
                .client
                .release(self.id(), &self.deps.acceptor_id)
                .await
            {
                Ok(outcome) => {
                    let outcome = match outcome {
                        ReleaseOutcome::Released => "released",
                        ReleaseOutcome::NotHolder => "not_holder",
                        ReleaseOutcome::Gone => "gone",
                    };
                    self.event("released", json!({ "outcome": outcome }));
                    return;
                }
                Err(e) => {
                    warn!(session_id = self.id(), attempt, error = %e, "releasing the claim failed");
                    tokio::time::sleep(Duration::from_millis(500 * attempt as u64)).await;
                }
            }
        }
        // The claim expires by itself; the session is not lost.
        self.event("release_failed", json!({}));
    }
}

/// Drives a slow `step` to completion while keeping the claim alive: `renew`
/// runs whenever `due_in` says the claim is due.
pub(crate) async fn keep_claim_alive<S, T>(
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

enum StartError {
    /// The session must not be started at all (the binary failed
    /// verification): release the claim.
    Refused(String),
    /// Too little claim time left for the next slow step.
    Deadline,
    Failed(anyhow::Error),
}

fn current_user() -> String {
    nix_user().unwrap_or_else(|| "root".to_owned())
}

fn nix_user() -> Option<String> {
    std::env::var("USER").ok().filter(|u| !u.is_empty())
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

    #[test]
    fn operator_requests_reach_only_a_registered_runner() {
        let stops = Arc::new(OperatorStops::default());
        let stop = OperatorStop {
            keep_snapshot: true,
        };
        assert!(!stops.request("s", stop));
        let first = stops.register("s");
        assert!(stops.is_running("s"));
        assert!(stops.request("s", stop));
        assert_eq!(*first.rx.borrow(), Some(stop));
        // A later runner of the same session replaces the entry; the earlier
        // one going away does not remove it.
        let second = stops.register("s");
        drop(first);
        assert!(stops.is_running("s"));
        assert!(stops.request("s", stop));
        assert_eq!(*second.rx.borrow(), Some(stop));
        drop(second);
        assert!(!stops.is_running("s"));
        assert!(!stops.request("s", stop));
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
