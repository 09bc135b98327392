//! The remote process: started (recorded first), restarted, stopped.

use std::time::Duration;

use anyhow::{Context, anyhow};
use fleet::Secret;
use sandbox::{Handle, MachineInfo, ProcessRef, ProcessSpec};
use serde_json::json;
use tracing::{info, warn};

use super::SessionRunner;
use super::step::{KILL_GRACE, RecordFailed, StepCtx, StepError};
use crate::contract::{self, RemoteLaunch};
use crate::metrics::Metrics;
use crate::planner::{EntryObs, RemoteObs, Stage};
use crate::repos;
use common::now_ms;

impl SessionRunner {
    /// Starts a remote in the existing sandbox, recording its name first:
    /// nothing is spawned when that record fails ([`StepError::Record`]).
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
        let ctx = self.ctx();
        ctx.logs
            .redactor()
            .add_handed_out(self.rec.session_id.as_str(), token.expose());
        let gateway_url = self.gateway_url().with_context(|| {
            format!(
                "the claim gave no gateway URL and none is configured: set {} (--gateway-url, \
                 or {})",
                crate::settings::names::GATEWAY_URL.name,
                crate::settings::names::GATEWAY_URL.env.unwrap_or_default()
            )
        })?;
        // A sandbox may see the host under another address than loopback.
        let gateway_url = ctx.backend.gateway_url_for(&handle, &gateway_url);
        // The user, browser and desktop are the sandbox's: Garrison's own
        // `USER` names whoever started Garrison, not who runs the remote.
        let machine = ctx
            .backend
            .machine(&handle)
            .await
            .map_err(|e| anyhow!(e).context("asking the backend about the sandbox"))?;
        let cwd = self.remote_cwd(&handle).await;
        let spec = remote_spec(&ctx, &handle, &machine, &token, &gateway_url, cwd);
        let name = spec.name.clone();
        self.rec.process = Some(ProcessRef { id: name.clone() });
        self.rec.output_offset = 0;
        self.set_stage(Stage::Running)?;
        ctx.backend
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

    /// The directory the remote starts in: the one whose direct children
    /// are the session's repositories. A workspace restored or resumed here
    /// may be from before the layout changed (see `repos/layout.rs`): it is
    /// probed once per runner.
    async fn remote_cwd(&mut self, handle: &sandbox::Handle) -> String {
        if let Some(cwd) = &self.remote_cwd {
            return cwd.clone();
        }
        let probe = ProcessSpec {
            name: format!("layout-{}", now_ms()),
            argv: ["/bin/sh", "-c", repos::LEGACY_PROBE]
                .map(str::to_owned)
                .to_vec(),
            env: [("PATH".to_owned(), contract::PATH.to_owned())].into(),
            cwd: handle.workdir.clone(),
        };
        let output = match repos::run_to_end(&*self.deps.backend, handle, &probe).await {
            Ok((sandbox::ProcessStatus::Exited(0), output)) => {
                Some(String::from_utf8_lossy(&output).into_owned())
            }
            Ok((status, _)) => {
                warn!(
                    session_id = self.id(),
                    ?status,
                    "probing the workspace layout failed; starting the remote in the workdir"
                );
                None
            }
            Err(e) => {
                warn!(session_id = self.id(), error = %e, "probing the workspace layout failed; starting the remote in the workdir");
                None
            }
        };
        let cwd = repos::remote_cwd(&handle.workdir, output.as_deref());
        if cwd != handle.workdir {
            info!(
                session_id = self.id(),
                cwd, "the workspace has the old repos/ layout; the remote starts there"
            );
            self.event("legacy_layout", json!({ "cwd": cwd }));
        }
        // Only a probe that ran is kept: one that failed is tried again at
        // the next start of the remote.
        if output.is_some() {
            self.remote_cwd = Some(cwd.clone());
        }
        cwd
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
            self.remote_stopped_at = Some(now_ms());
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

/// The remote's process: its argv, and the environment that tells it its
/// gateway, token and sandbox (see [`contract::remote_env`]).
fn remote_spec(
    ctx: &StepCtx,
    handle: &Handle,
    machine: &MachineInfo,
    token: &Secret,
    gateway_url: &str,
    cwd: String,
) -> ProcessSpec {
    let name = format!("remote-{}", now_ms());
    let env = contract::remote_env(&RemoteLaunch {
        gateway_url,
        connect_token: token,
        session_id: ctx.id(),
        state_dir: &handle.state_dir,
        home: &handle.home,
        user: &machine.user,
        chrome_path: machine.chrome_path.as_deref(),
        display: machine.display.as_deref(),
    });
    ProcessSpec {
        name,
        argv: contract::remote_argv(&handle.bin_dir),
        env,
        cwd,
    }
}
