//! Winding a session down: the remote stopped, the workspace snapshotted
//! or dropped, the sandbox suspended or destroyed, the claim released.

use std::time::Duration;

use anyhow::anyhow;
use fleet::ReleaseOutcome;
use sandbox::{Handle, SandboxName, SnapshotRef};
use serde_json::json;
use tracing::{error, info, warn};

use super::{KILL_GRACE, RecordFailed, SessionRunner, keep_claim_alive, record_failure};
use crate::metrics::Metrics;
use crate::planner::{Finish, SandboxEnd, Stage, WindDownObs, plan_wind_down};
use crate::store::{SnapshotReason, StoredSnapshot};

/// Attempts of a release or a snapshot before giving up on it.
const FINISH_ATTEMPTS: u32 = 5;

/// What became of a snapshot the wind-down asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Snapshotted {
    Taken,
    /// The backend has no such sandbox any more.
    SandboxGone,
}

impl SessionRunner {
    pub(super) async fn finish(&mut self, finish: Finish) -> Result<(), RecordFailed> {
        if self.rec.stage != Stage::Finishing(finish) {
            self.set_stage(Stage::Finishing(finish))?;
            // Devin told a sleeping session's remote and it went by itself,
            // as the docs expect; else the kill after the grace said so.
            if finish == Finish::Suspended && !self.killed_remote {
                self.event("remote_exited_by_itself", json!({ "while": "suspended" }));
            }
            self.event("finishing", json!({ "finish": finish.to_string() }));
        }
        if let Err(e) = self.wind_down(finish).await {
            let e = record_failure(e)?;
            let message = format!("{e:#}");
            error!(session_id = self.id(), finish = %finish, error = %message, "finishing the session failed; retrying");
            self.event("finish_failed", json!({ "error": message }));
            self.pause(Duration::from_secs(2)).await;
            return Ok(());
        }
        let done = match finish {
            Finish::Failed => {
                error!(
                    session_id = self.id(),
                    error = self.rec.error.as_deref().unwrap_or("unknown"),
                    "session failed; a recovery snapshot was kept where possible"
                );
                Finish::Failed
            }
            other => other,
        };
        Metrics::inc(&self.deps.metrics.sessions_finished);
        // The event before the stage: whoever sees the stage final (status
        // commands, `logs -f`, the dashboard) finds the whole history.
        self.event("done", json!({ "finish": done.to_string() }));
        self.set_stage(Stage::Done(done))?;
        info!(session_id = self.id(), finish = %done, "session done");
        Ok(())
    }

    pub(super) async fn wind_down(&mut self, finish: Finish) -> anyhow::Result<()> {
        let backend = self.deps.backend.clone();
        let mut obs = WindDownObs {
            finish,
            ran_remote: self.rec.process.is_some(),
            suspend_keeps_memory: backend.capabilities().suspend_keeps_memory,
            suspend_failed: false,
            sandbox_gone: false,
        };
        if let Some(handle) = self.rec.handle.clone() {
            if let Some(process) = self.rec.process.clone() {
                backend
                    .kill(&handle, &process, KILL_GRACE)
                    .await
                    .map_err(|e| anyhow!(e))?;
                self.copy_output(&handle, &process).await?;
            }
            if let Some(reason) = plan_wind_down(&obs).snapshot
                && self.snapshot(&handle, reason).await? == Snapshotted::SandboxGone
            {
                warn!(
                    session_id = self.id(),
                    sandbox = handle.name,
                    "the sandbox is gone (a destroy was cut short); nothing to snapshot, \
                     a resume starts from the newest snapshot kept"
                );
                self.event("snapshot_skipped", json!({ "reason": "sandbox_gone" }));
                obs.sandbox_gone = true;
            }
            if plan_wind_down(&obs).sandbox == SandboxEnd::Suspend {
                match backend.suspend(&handle).await {
                    Ok(()) => self.event("sandbox_suspended", json!({ "sandbox": handle.name })),
                    Err(e) => {
                        warn!(session_id = self.id(), error = %e, "suspending the sandbox failed; destroying it (the snapshot remains)");
                        obs.suspend_failed = true;
                    }
                }
            }
            if plan_wind_down(&obs).sandbox == SandboxEnd::Destroy {
                backend.destroy(&handle).await.map_err(|e| anyhow!(e))?;
                self.event("sandbox_destroyed", json!({}));
            }
            self.rec.handle = None;
            self.rec.process = None;
            self.save()?;
        }
        let plan = plan_wind_down(&obs);
        if plan.delete_snapshots {
            self.delete_snapshots().await;
        }
        if plan.release {
            self.release().await;
        }
        Ok(())
    }

    pub(super) async fn snapshot(
        &mut self,
        handle: &Handle,
        reason: SnapshotReason,
    ) -> anyhow::Result<Snapshotted> {
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
                async |runner: &mut SessionRunner| runner.renew_in_step().await,
            )
            .await;
            self.check_renewals()?;
            match result {
                Ok(snapshot) => {
                    self.deps.metrics.record_snapshot(
                        started.elapsed().as_secs_f64() * 1000.0,
                        snapshot.size_bytes,
                    );
                    // Unrecorded, the snapshot would be lost to this store
                    // once the sandbox is destroyed: the runner stops first.
                    self.deps
                        .store
                        .add_snapshot(&StoredSnapshot {
                            session_id: self.id().to_owned(),
                            reason,
                            snapshot: snapshot.clone(),
                        })
                        .map_err(RecordFailed)?;
                    self.event("snapshot", json!({ "snapshot": snapshot.id, "bytes": snapshot.size_bytes, "reason": reason }));
                    return Ok(Snapshotted::Taken);
                }
                // No attempt can succeed; what was there to keep was kept
                // before the destroy that made it go.
                Err(e) if e.is_gone() => return Ok(Snapshotted::SandboxGone),
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
    pub(super) async fn known_snapshots(&self, name: &SandboxName) -> Vec<SnapshotRef> {
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

    pub(super) async fn delete_snapshots(&self) {
        let name = SandboxName::for_session(self.id());
        for snapshot in self.known_snapshots(&name).await {
            match self.deps.backend.delete_snapshot(&snapshot).await {
                Ok(()) => {
                    if let Err(e) = self.deps.store.remove_snapshot(&snapshot.id) {
                        warn!(session_id = self.id(), snapshot = snapshot.id, error = %e, "forgetting a deleted snapshot failed");
                    }
                }
                Err(e) => {
                    warn!(session_id = self.id(), snapshot = snapshot.id, error = %e, "deleting a snapshot failed")
                }
            }
        }
    }

    pub(super) async fn release(&self) {
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
