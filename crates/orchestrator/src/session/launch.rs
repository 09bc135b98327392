//! Launching the remote in a session's sandbox: the gateway it dials, the
//! sandbox's user and browser, the directory it starts in (probed once for
//! a workspace of the old layout), the process recorded, then spawned. A
//! function of a [`StepCtx`] and explicit inputs; the record before the
//! spawn goes through [`LaunchRecords`], and the runner records what the
//! launch returns.

use anyhow::{Context, anyhow};
use fleet::Secret;
use sandbox::{Handle, MachineInfo, ProcessRef, ProcessSpec};
use serde_json::json;
use tracing::{info, warn};

use super::step::{RecordFailed, StepCtx, StepError};
use crate::contract::{self, RemoteLaunch};
use crate::repos;
use common::now_ms;

/// What [`launch`] takes from the session.
pub(super) struct LaunchInput<'a> {
    /// The sandbox to start the remote in.
    pub(super) handle: &'a Handle,
    /// The connect token the claim handed out.
    pub(super) token: &'a Secret,
    /// The gateway the remote dials: the claim's, else the configured one.
    pub(super) gateway_url: Option<String>,
}

/// What a launch keeps and writes down (the runner implements it).
pub(super) trait LaunchRecords {
    /// Where the remote starts, once known for this runner.
    fn known_cwd(&self) -> Option<String>;
    /// Keeps where the remote starts, once a probe found it.
    fn keep_cwd(&mut self, cwd: String);
    /// Records the process about to be spawned: nothing is spawned when
    /// this fails.
    fn launching(&mut self, process: ProcessRef) -> Result<(), RecordFailed>;
}

/// Starts a remote in the sandbox, recording its name first
/// ([`StepError::Record`] when that fails: nothing is spawned). Returns
/// the process's name.
pub(super) async fn launch(
    ctx: &StepCtx,
    host: &mut impl LaunchRecords,
    input: LaunchInput<'_>,
) -> Result<String, StepError> {
    let LaunchInput {
        handle,
        token,
        gateway_url,
    } = input;
    ctx.logs.redactor().add_handed_out(ctx.id(), token.expose());
    let gateway_url = gateway_url.with_context(|| {
        format!(
            "the claim gave no gateway URL and none is configured: set {} (--gateway-url, \
             or {})",
            crate::settings::names::GATEWAY_URL.name,
            crate::settings::names::GATEWAY_URL.env.unwrap_or_default()
        )
    })?;
    // A sandbox may see the host under another address than loopback.
    let gateway_url = ctx.backend.gateway_url_for(handle, &gateway_url);
    // The user, browser and desktop are the sandbox's: Garrison's own
    // `USER` names whoever started Garrison, not who runs the remote.
    let machine = ctx
        .backend
        .machine(handle)
        .await
        .map_err(|e| anyhow!(e).context("asking the backend about the sandbox"))?;
    let cwd = match host.known_cwd() {
        Some(cwd) => cwd,
        None => {
            let (cwd, probed) = remote_cwd(ctx, handle).await;
            // Only a probe that ran is kept: one that failed is tried again
            // at the next start of the remote.
            if probed {
                host.keep_cwd(cwd.clone());
            }
            cwd
        }
    };
    let spec = remote_spec(ctx, handle, &machine, token, &gateway_url, cwd);
    let name = spec.name.clone();
    host.launching(ProcessRef { id: name.clone() })?;
    ctx.backend
        .spawn(handle, &spec)
        .await
        .map_err(|e| anyhow!(e))?;
    Ok(name)
}

/// The directory the remote starts in: the one whose direct children are
/// the session's repositories. A workspace restored or resumed here may be
/// from before the layout changed (see `repos/layout.rs`), so it is
/// probed; the flag says whether the probe ran.
async fn remote_cwd(ctx: &StepCtx, handle: &Handle) -> (String, bool) {
    let probe = ProcessSpec {
        name: format!("layout-{}", now_ms()),
        argv: ["/bin/sh", "-c", repos::LEGACY_PROBE]
            .map(str::to_owned)
            .to_vec(),
        env: [("PATH".to_owned(), contract::PATH.to_owned())].into(),
        cwd: handle.workdir.clone(),
    };
    let output = match repos::run_to_end(&*ctx.backend, handle, &probe).await {
        Ok((sandbox::ProcessStatus::Exited(0), output)) => {
            Some(String::from_utf8_lossy(&output).into_owned())
        }
        Ok((status, _)) => {
            warn!(
                session_id = ctx.id(),
                ?status,
                "probing the workspace layout failed; starting the remote in the workdir"
            );
            None
        }
        Err(e) => {
            warn!(session_id = ctx.id(), error = %e, "probing the workspace layout failed; starting the remote in the workdir");
            None
        }
    };
    let cwd = repos::remote_cwd(&handle.workdir, output.as_deref());
    if cwd != handle.workdir {
        info!(
            session_id = ctx.id(),
            cwd, "the workspace has the old repos/ layout; the remote starts there"
        );
        ctx.event("legacy_layout", json!({ "cwd": cwd }));
    }
    (cwd, output.is_some())
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
