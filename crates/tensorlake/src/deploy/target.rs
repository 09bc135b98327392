//! The I/O of `garrison deploy tensorlake`: Tensorlake's lifecycle and
//! process APIs, driven by the decisions of [`super::plan`].

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use sandbox::plugin::deploy::{DeployOutput, DeployRequest, read_binary};

use super::lookup::{find, newest_uptime};
use super::plan::{self, Layout, ProcessStep, SandboxStep};
use crate::models::{
    CreateSandbox, Resources, RestartConfig, RestartPolicy, SandboxInfo, SandboxStatus,
    StartProcess,
};
use crate::{Client, SandboxClient, TensorlakeSettings};

/// Bounds a wait for a state change; never an expectation of speed.
const TRANSITION_GUARD: Duration = Duration::from_secs(600);

struct Poll(Duration);

impl Poll {
    fn new() -> Self {
        Self(Duration::from_millis(50))
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(1));
    }
}

/// Finds, creates or resumes the sandbox and starts the deployed serve in
/// it unless one runs.
pub(super) async fn ensure(
    tl: &TensorlakeSettings,
    request: &DeployRequest,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<()> {
    let client = Client::new(&tl.api_url, tl.api_key.clone())?;
    let info = ensure_sandbox(&client, request, tl.image.as_deref(), out).await?;
    let dp = client.sandbox(&info.sandbox_id, info.sandbox_url.as_deref())?;
    let layout = Layout::new(&tl.sandbox_root, &info.sandbox_id);
    let processes = dp
        .list_processes()
        .await
        .context("listing the sandbox's processes")?;
    match plan::process_step(&processes) {
        ProcessStep::Keep { name, pid } => {
            let up = newest_uptime(&processes);
            out.say(&format!(
                "garrison serve is running ({name}, pid {pid}{up}); nothing to do"
            ));
        }
        ProcessStep::Start { name } => {
            let env = plan::serve_env(tl, request, &layout);
            install(&dp, &layout, request).await?;
            let argv =
                plan::serve_argv(&layout, request.config_file.is_some(), &request.serve_args);
            let started = dp
                .start_process(&StartProcess {
                    command: layout.binary(),
                    args: argv,
                    env,
                    working_dir: Some(layout.dir.clone()),
                    name: Some(name.clone()),
                    restart: Some(RestartConfig {
                        policy: RestartPolicy::OnFailure,
                    }),
                })
                .await
                .context("starting garrison serve in the sandbox")?;
            out.say(&format!(
                "started garrison serve ({name}, pid {}) in sandbox {}",
                started.pid, request.name
            ));
        }
    }
    Ok(())
}

/// Finds, creates or resumes the sandbox, and waits until it runs.
async fn ensure_sandbox(
    client: &Client,
    request: &DeployRequest,
    default_image: Option<&str>,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<SandboxInfo> {
    let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
    let mut poll = Poll::new();
    let mut found = find(client, &request.name).await?;
    let mut said = false;
    loop {
        let step = plan::sandbox_step(found.as_ref().map(|s| &s.status));
        match (step, &found) {
            (SandboxStep::Ready, Some(info)) => return Ok(info.clone()),
            (SandboxStep::Create, _) => {
                let image = request.image.clone().or(default_image.map(str::to_owned));
                let created = client
                    .create_sandbox(&CreateSandbox {
                        image,
                        resources: Resources {
                            cpus: request.cpus,
                            memory_mb: request.memory_mb,
                            disk_mb: request.disk_mb,
                        },
                        timeout_secs: Some(request.timeout_secs),
                        network: None,
                        snapshot_id: None,
                        name: Some(request.name.clone()),
                        // Woken by this command only: a look at its status or
                        // logs leaves it as it is.
                        auto_resume: Some(false),
                    })
                    .await
                    .with_context(|| format!("creating sandbox {}", request.name))?;
                match created.status {
                    SandboxStatus::Failed => {
                        // It keeps the name until deleted.
                        let _ = client.delete_sandbox(&created.sandbox_id).await;
                        bail!(
                            "sandbox {} (id {}) failed to start: {}",
                            request.name,
                            created.sandbox_id,
                            created
                                .termination_reason
                                .as_deref()
                                .unwrap_or("no reason given")
                        );
                    }
                    // The service's wait ran out; the sandbox stays queued.
                    SandboxStatus::Timeout => out.say(&format!(
                        "sandbox {} (id {}) is queued for capacity; waiting for it",
                        request.name, created.sandbox_id
                    )),
                    _ => out.say(&format!(
                        "created sandbox {} (id {})",
                        request.name, created.sandbox_id
                    )),
                }
            }
            (SandboxStep::Resume, Some(info)) => {
                match client.resume_sandbox(&info.sandbox_id).await {
                    Ok(()) => out.say(&format!(
                        "resuming sandbox {} (id {})",
                        request.name, info.sandbox_id
                    )),
                    Err(e) if e.is_conflict() => {}
                    Err(e) => return Err(e).context(format!("resuming sandbox {}", request.name)),
                }
            }
            (_, info) => {
                if !said && let Some(info) = info {
                    out.say(&format!(
                        "sandbox {} is {}; waiting for it to settle",
                        request.name, info.status
                    ));
                    said = true;
                }
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "sandbox {} did not come to run within {TRANSITION_GUARD:?}",
                request.name
            );
        }
        poll.wait().await;
        found = find(client, &request.name).await?;
    }
}

/// Creates the directories and puts the binary (and the settings file) in.
async fn install(
    dp: &SandboxClient,
    layout: &Layout,
    request: &DeployRequest,
) -> anyhow::Result<()> {
    let mut mkdir = vec!["mkdir", "-p", "-m", "700"];
    let dirs = layout.dirs();
    mkdir.extend(dirs.iter().map(String::as_str));
    run_ok(dp, &mkdir).await?;
    let bytes = read_binary(request.binary.as_deref()).await?;
    let target = layout.binary();
    let tmp = format!("{target}.new");
    dp.put_file(&tmp, &bytes)
        .await
        .context("copying garrison into the sandbox")?;
    // The files API sets no mode; the rename makes the replacement atomic.
    run_ok(
        dp,
        &[
            "/bin/sh",
            "-c",
            "chmod 755 \"$1\" && mv -f \"$1\" \"$2\"",
            "sh",
            &tmp,
            &target,
        ],
    )
    .await?;
    if let Some(text) = request.config_file.as_deref() {
        let path = layout.config_file();
        dp.put_file(&path, text)
            .await
            .context("copying the settings file into the sandbox")?;
        run_ok(dp, &["chmod", "600", &path]).await?;
    }
    Ok(())
}

/// Runs a short helper command in the sandbox to completion, over one
/// streaming request.
async fn run_ok(dp: &SandboxClient, argv: &[&str]) -> anyhow::Result<()> {
    let (command, rest) = argv.split_first().context("a command")?;
    let request = StartProcess {
        command: (*command).to_owned(),
        args: rest.iter().map(|a| (*a).to_owned()).collect(),
        env: BTreeMap::from([(
            "PATH".to_owned(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        )]),
        working_dir: None,
        name: None,
        restart: None,
    };
    let run = tokio::time::timeout(TRANSITION_GUARD, dp.run_process(&request, 2000))
        .await
        .map_err(|_| anyhow::anyhow!("{command} in the sandbox did not finish"))?
        .with_context(|| format!("running {command} in the sandbox"))?;
    if run.ended && run.exit_code == Some(0) {
        return Ok(());
    }
    bail!(
        "{} in the sandbox ended with code {:?}, signal {:?}: {}",
        argv.join(" "),
        run.exit_code,
        run.signal,
        run.output
    );
}
