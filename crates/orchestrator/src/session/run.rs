//! The remote process as the runner records it: started (see
//! `launch.rs`; its name recorded first), restarted, stopped.

use std::time::Duration;

use anyhow::Context;
use sandbox::ProcessRef;
use serde_json::json;
use tracing::{info, warn};

use super::launch::{LaunchInput, LaunchRecords, launch};
use super::step::{KILL_GRACE, RecordFailed, StepError};
use super::{SessionRunner, local_now};
use crate::metrics::Metrics;
use crate::planner::{EntryObs, RemoteObs, Stage};
use common::now_ms;

impl SessionRunner {
    /// Starts a remote in the existing sandbox (see [`launch`]), recording
    /// its name first: nothing is spawned when that record fails
    /// ([`StepError::Record`]).
    pub(super) async fn spawn_remote(&mut self) -> Result<(), StepError> {
        let handle = self
            .rec
            .handle
            .clone()
            .context("no sandbox to start the remote in")?;
        let token = self
            .claim
            .connect_token()
            .cloned()
            .context("no connect token")?;
        let input = LaunchInput {
            handle: &handle,
            token: &token,
            gateway_url: self.gateway_url(),
        };
        let name = launch(&self.ctx(), self, input).await?;
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
        self.save()?;
        info!(session_id = self.id(), process = name, "remote started");
        self.event(
            "remote_started",
            json!({ "process": name, "remote_sha": self.rec.remote_sha }),
        );
        Ok(())
    }

    pub(super) async fn restart_remote(&mut self) -> Result<(), RecordFailed> {
        if matches!(self.remote, RemoteObs::Exited(_) | RemoteObs::Lost) {
            self.rec.restarts += 1;
            Metrics::inc(&self.deps.metrics.remote_restarts);
            self.event(
                "remote_restart",
                json!({ "restart": self.rec.restarts, "previous": self.remote.to_string() }),
            );
        }
        if let Err(e) = self.spawn_remote().await {
            let e = match e {
                StepError::Record(failed) => return Err(failed),
                StepError::Failed(e) => e,
            };
            warn!(session_id = self.id(), error = %e, "restarting the remote failed");
            self.remote = RemoteObs::Lost;
            self.remote_stopped_at = Some(local_now());
            self.pause(Duration::from_secs(1)).await;
        }
        Ok(())
    }

    pub(super) async fn kill_remote(&mut self) {
        if let (Some(handle), Some(process)) = (self.rec.handle.clone(), self.rec.process.clone()) {
            // A sleeping session's remote is killed only once it outlasted
            // the grace it had to exit by itself: say so apart.
            let kind = if self.entry_obs == EntryObs::Present(fleet::SessionStatus::Suspended)
                && self.operator_stop.is_none()
            {
                "remote_killed_after_grace"
            } else {
                "remote_kill"
            };
            self.event(kind, json!({ "entry": self.entry_obs.to_string() }));
            self.killed_remote = true;
            if let Err(e) = self.deps.backend.kill(&handle, &process, KILL_GRACE).await {
                warn!(session_id = self.id(), error = %e, "stopping the remote failed");
                self.pause(Duration::from_secs(1)).await;
            }
        }
    }
}

impl LaunchRecords for SessionRunner {
    fn known_cwd(&self) -> Option<String> {
        self.remote_cwd.clone()
    }

    fn keep_cwd(&mut self, cwd: String) {
        self.remote_cwd = Some(cwd);
    }

    fn launching(&mut self, process: ProcessRef) -> Result<(), RecordFailed> {
        self.rec.process = Some(process);
        self.rec.output_offset = 0;
        self.set_stage(Stage::Running)
    }
}
