//! The remote process: started (recorded first), restarted, stopped.

use std::time::Duration;

use anyhow::{Context, anyhow};
use sandbox::{ProcessRef, ProcessSpec};
use serde_json::json;
use tracing::{info, warn};

use super::{KILL_GRACE, RecordFailed, SessionRunner, now_ms, record_failure};
use crate::contract::{self, RemoteLaunch};
use crate::metrics::Metrics;
use crate::planner::{RemoteObs, Stage};

impl SessionRunner {
    /// Starts a remote in the existing sandbox, recording its name first:
    /// nothing is spawned when that record fails ([`RecordFailed`] in the
    /// error).
    pub(super) async fn spawn_remote(&mut self) -> anyhow::Result<()> {
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
        self.deps
            .logs
            .redactor()
            .add_handed_out(&self.rec.session_id, token.expose());
        let gateway_url = self
            .claim
            .gateway_url
            .clone()
            .context("the claim gave no gateway URL")?;
        // A sandbox may see the host under another address than loopback.
        let gateway_url = self.deps.backend.gateway_url_for(&handle, &gateway_url);
        // The user, browser and desktop are the sandbox's: Garrison's own
        // `USER` names whoever started Garrison, not who runs the remote.
        let machine = self
            .deps
            .backend
            .machine(&handle)
            .await
            .map_err(|e| anyhow!(e).context("asking the backend about the sandbox"))?;
        let name = format!("remote-{}", now_ms());
        let env = contract::remote_env(&RemoteLaunch {
            gateway_url: &gateway_url,
            connect_token: &token,
            session_id: self.id(),
            state_dir: &handle.state_dir,
            home: &handle.home,
            user: &machine.user,
            chrome_path: machine.chrome_path.as_deref(),
            display: machine.display.as_deref(),
        });
        let spec = ProcessSpec {
            name: name.clone(),
            argv: contract::remote_argv(&handle.bin_dir),
            env,
            cwd: handle.workdir.clone(),
        };
        self.rec.process = Some(ProcessRef { id: name.clone() });
        self.rec.output_offset = 0;
        self.set_stage(Stage::Running)?;
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
            let e = record_failure(e)?;
            warn!(session_id = self.id(), error = %e, "restarting the remote failed");
            self.remote = RemoteObs::Lost;
            self.remote_stopped_at = Some(now_ms());
            self.pause(Duration::from_secs(1)).await;
        }
        Ok(())
    }

    pub(super) async fn kill_remote(&mut self) {
        if let (Some(handle), Some(process)) = (self.rec.handle.clone(), self.rec.process.clone()) {
            self.event(
                "remote_kill",
                json!({ "entry": self.entry_obs.to_string() }),
            );
            if let Err(e) = self.deps.backend.kill(&handle, &process, KILL_GRACE).await {
                warn!(session_id = self.id(), error = %e, "stopping the remote failed");
                self.pause(Duration::from_secs(1)).await;
            }
        }
    }
}
