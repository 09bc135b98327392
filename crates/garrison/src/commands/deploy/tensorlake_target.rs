//! The I/O of `garrison deploy tensorlake`: Tensorlake's lifecycle and
//! process APIs, driven by the decisions of [`super::plan`].

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use orchestrator::settings::HostEnv;
use orchestrator::settings::ServeConfig;
use tensorlake::dataplane::ProcessKey;
use tensorlake::models::{
    CreateSandbox, ProcessInfo, ProcessState, Resources, RestartConfig, RestartPolicy, SandboxInfo,
    SandboxStatus, StartProcess,
};
use tensorlake::{Client, SandboxClient};

use super::TensorlakeDeployArgs;
use super::plan::{self, Layout, ProcessStep, SandboxStep};
use crate::commands::serve::ServeArgs;

/// Bounds a wait for a state change; never an expectation of speed.
const TRANSITION_GUARD: Duration = Duration::from_secs(600);
/// How often a suspended sandbox is looked at while following its logs.
const SUSPENDED_POLL: Duration = Duration::from_secs(2);
/// Exit status of `--status` when serve is not running.
const NOT_RUNNING: i32 = 3;

/// `garrison serve`'s flags, parsed as serve would parse them.
#[derive(Parser, Debug)]
#[command(name = "serve")]
pub(super) struct ServeCli {
    #[command(flatten)]
    pub(super) serve: ServeArgs,
}

pub(crate) async fn run(args: TensorlakeDeployArgs) -> anyhow::Result<()> {
    plan::check_name(&args.name).map_err(anyhow::Error::msg)?;
    if args.status || args.logs || args.terminate {
        let client = client_for_reading(&args)?;
        if args.status {
            let code = status(&client, &args.name).await?;
            if code != 0 {
                std::io::stdout().flush()?;
                std::process::exit(code);
            }
            return Ok(());
        }
        if args.logs {
            return logs(&client, &args.name, args.follow).await;
        }
        return terminate(&client, &args.name).await;
    }
    plan::check_serve_args(&args.serve_args).map_err(anyhow::Error::msg)?;
    let resolved = resolve(&args)?;
    ensure(&args, &resolved).await
}

/// What deploying needs from the settings.
struct Resolved {
    config: ServeConfig,
    /// The settings file to copy in.
    config_file: Option<Vec<u8>>,
    host_vars: BTreeMap<String, String>,
}

/// Resolves the settings exactly as the deployed `garrison serve
/// --backend tensorlake <SERVE_ARGS>` will, so that a mistake is reported
/// here rather than inside the sandbox.
fn resolve(args: &TensorlakeDeployArgs) -> anyhow::Result<Resolved> {
    let mut argv: Vec<String> = vec!["serve".into(), "--backend".into(), "tensorlake".into()];
    let config_path = config_path(args);
    if let Some(path) = &config_path {
        argv.push("--config".into());
        argv.push(path.display().to_string());
    }
    argv.extend(args.serve_args.iter().cloned());
    let cli = ServeCli::try_parse_from(&argv).map_err(|e| {
        anyhow::anyhow!(
            "the serve options after `--`: {}",
            e.render().to_string().trim()
        )
    })?;
    let config = crate::commands::serve::resolve(&cli.serve)?;
    let config_file = match &config_path {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => None,
    };
    Ok(Resolved {
        config,
        config_file,
        host_vars: HostEnv::current().vars,
    })
}

fn config_path(args: &TensorlakeDeployArgs) -> Option<PathBuf> {
    super::tensorlake_access::config_path(args.config.as_deref())
}

/// A client from the Tensorlake settings alone: `--status`, `--logs` and
/// `--terminate` need no Devin token.
fn client_for_reading(args: &TensorlakeDeployArgs) -> anyhow::Result<Client> {
    Ok(super::tensorlake_access::client(args.config.as_deref())?.0)
}

/// The live sandbox of that name, if any.
async fn find(client: &Client, name: &str) -> anyhow::Result<Option<SandboxInfo>> {
    client
        .find_by_name(name)
        .await
        .with_context(|| format!("looking up the Tensorlake sandbox {name}"))
}

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

async fn ensure(args: &TensorlakeDeployArgs, resolved: &Resolved) -> anyhow::Result<()> {
    let tl = plan::tensorlake_settings(&resolved.config)
        .context("no outpost is served with the tensorlake backend")?;
    let client = Client::new(&tl.api_url, tl.api_key.clone())?;
    let info = ensure_sandbox(&client, args, tl.image.as_deref()).await?;
    let dp = client.sandbox(&info.sandbox_id, info.sandbox_url.as_deref())?;
    let layout = Layout::new(&tl.sandbox_root, &info.sandbox_id);
    let processes = dp
        .list_processes()
        .await
        .context("listing the sandbox's processes")?;
    match plan::process_step(&processes) {
        ProcessStep::Keep { name, pid } => {
            let up = newest_uptime(&processes);
            println!("garrison serve is running ({name}, pid {pid}{up}); nothing to do");
        }
        ProcessStep::Start { name } => {
            let env = plan::serve_env(&resolved.config, &resolved.host_vars, &layout)
                .map_err(anyhow::Error::msg)?;
            install(&dp, &layout, args, resolved.config_file.as_deref()).await?;
            let argv = plan::serve_argv(&layout, resolved.config_file.is_some(), &args.serve_args);
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
            println!(
                "started garrison serve ({name}, pid {}) in sandbox {}",
                started.pid, args.name
            );
        }
    }
    Ok(())
}

fn newest_uptime(processes: &[ProcessInfo]) -> String {
    plan::newest_serve(processes)
        .and_then(|p| p.started_at.as_ref()?.unix_ms())
        .map(|at| format!(", up {}", plan::uptime(now_ms() - at)))
        .unwrap_or_default()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Finds, creates or resumes the sandbox, and waits until it runs.
async fn ensure_sandbox(
    client: &Client,
    args: &TensorlakeDeployArgs,
    default_image: Option<&str>,
) -> anyhow::Result<SandboxInfo> {
    let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
    let mut poll = Poll::new();
    let mut found = find(client, &args.name).await?;
    let mut said = false;
    loop {
        let step = plan::sandbox_step(found.as_ref().map(|s| &s.status));
        match (step, &found) {
            (SandboxStep::Ready, Some(info)) => return Ok(info.clone()),
            (SandboxStep::Create, _) => {
                let image = args.image.clone().or(default_image.map(str::to_owned));
                let created = client
                    .create_sandbox(&CreateSandbox {
                        image,
                        resources: Resources {
                            cpus: args.cpus,
                            memory_mb: args.memory_mb,
                            disk_mb: Some(args.disk_mb),
                        },
                        timeout_secs: Some(args.timeout_secs),
                        network: None,
                        snapshot_id: None,
                        name: Some(args.name.clone()),
                        // Woken by this command only: a look at its status or
                        // logs leaves it as it is.
                        auto_resume: Some(false),
                    })
                    .await
                    .with_context(|| format!("creating sandbox {}", args.name))?;
                match created.status {
                    SandboxStatus::Failed => {
                        // It keeps the name until deleted.
                        let _ = client.delete_sandbox(&created.sandbox_id).await;
                        bail!(
                            "sandbox {} (id {}) failed to start: {}",
                            args.name,
                            created.sandbox_id,
                            created
                                .termination_reason
                                .as_deref()
                                .unwrap_or("no reason given")
                        );
                    }
                    // The service's wait ran out; the sandbox stays queued.
                    SandboxStatus::Timeout => println!(
                        "sandbox {} (id {}) is queued for capacity; waiting for it",
                        args.name, created.sandbox_id
                    ),
                    _ => println!("created sandbox {} (id {})", args.name, created.sandbox_id),
                }
            }
            (SandboxStep::Resume, Some(info)) => {
                match client.resume_sandbox(&info.sandbox_id).await {
                    Ok(()) => println!("resuming sandbox {} (id {})", args.name, info.sandbox_id),
                    Err(e) if e.is_conflict() => {}
                    Err(e) => return Err(e).context(format!("resuming sandbox {}", args.name)),
                }
            }
            (_, info) => {
                if !said && let Some(info) = info {
                    println!(
                        "sandbox {} is {}; waiting for it to settle",
                        args.name, info.status
                    );
                    said = true;
                }
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "sandbox {} did not come to run within {TRANSITION_GUARD:?}",
                args.name
            );
        }
        poll.wait().await;
        found = find(client, &args.name).await?;
    }
}

/// Creates the directories and puts the binary (and the settings file) in.
async fn install(
    dp: &SandboxClient,
    layout: &Layout,
    args: &TensorlakeDeployArgs,
    config_file: Option<&[u8]>,
) -> anyhow::Result<()> {
    let mut mkdir = vec!["mkdir", "-p", "-m", "700"];
    let dirs = layout.dirs();
    mkdir.extend(dirs.iter().map(String::as_str));
    run_ok(dp, &mkdir).await?;
    let binary = match &args.binary {
        Some(path) => path.clone(),
        None => std::env::current_exe().context("finding this garrison binary")?,
    };
    let bytes = tokio::fs::read(&binary)
        .await
        .with_context(|| format!("reading {}", binary.display()))?;
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
    if let Some(text) = config_file {
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

/// Prints the state; the exit status for the shell.
async fn status(client: &Client, name: &str) -> anyhow::Result<i32> {
    let Some(info) = find(client, name).await? else {
        println!("sandbox:  none named {name} (deploy with `garrison deploy tensorlake`)");
        return Ok(NOT_RUNNING);
    };
    println!("sandbox:  {name} (id {}): {}", info.sandbox_id, info.status);
    if info.status != SandboxStatus::Running {
        println!(
            "serve:    not looked at while the sandbox is {} (it is not woken; \
             `garrison deploy tensorlake` resumes it)",
            info.status
        );
        return Ok(NOT_RUNNING);
    }
    let dp = client.sandbox(&info.sandbox_id, info.sandbox_url.as_deref())?;
    let processes = dp.list_processes().await?;
    match plan::newest_serve(&processes) {
        None => {
            println!("serve:    not started");
            Ok(NOT_RUNNING)
        }
        Some(p) => {
            let name = p
                .managed
                .as_ref()
                .and_then(|m| m.name.clone())
                .unwrap_or_default();
            let running = p.status == ProcessState::Running;
            let how = match (&p.status, p.exit_code, p.signal) {
                (ProcessState::Running, _, _) => "running".to_owned(),
                (s, Some(code), _) => format!("{s} (code {code})"),
                (s, None, Some(sig)) => format!("{s} (signal {sig})"),
                (s, None, None) => s.to_string(),
            };
            let up = if running {
                newest_uptime(&processes).replace(", up", "; uptime")
            } else {
                String::new()
            };
            println!("serve:    {name} (pid {}) {how}{up}", p.pid);
            Ok(if running { 0 } else { NOT_RUNNING })
        }
    }
}

async fn terminate(client: &Client, name: &str) -> anyhow::Result<()> {
    let Some(info) = find(client, name).await? else {
        println!("no sandbox named {name}; nothing to terminate");
        return Ok(());
    };
    match client.delete_sandbox(&info.sandbox_id).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e).context(format!("deleting sandbox {name}")),
    }
    println!("terminated sandbox {name} (id {})", info.sandbox_id);
    Ok(())
}

/// The serve process's output; with `follow`, new lines as they come,
/// waiting without waking it while the sandbox is suspended and going on
/// with the next serve process when one is started.
async fn logs(client: &Client, name: &str, follow: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    let mut current: Option<String> = None;
    let mut printed = 0usize;
    let mut said_waiting = false;
    let mut said_ended: Option<String> = None;
    loop {
        let Some(info) = find(client, name).await? else {
            if current.is_some() {
                eprintln!("sandbox {name} is gone");
                return Ok(());
            }
            bail!("no sandbox named {name}");
        };
        if info.status != SandboxStatus::Running {
            if !follow {
                bail!(
                    "sandbox {name} is {}; its logs are read only while it runs \
                     (`garrison deploy tensorlake` resumes it)",
                    info.status
                );
            }
            if !said_waiting {
                eprintln!(
                    "sandbox {name} is {}; waiting for it to run again (it is not woken)",
                    info.status
                );
                said_waiting = true;
            }
            tokio::time::sleep(SUSPENDED_POLL).await;
            continue;
        }
        said_waiting = false;
        let dp = client.sandbox(&info.sandbox_id, info.sandbox_url.as_deref())?;
        let processes = dp.list_processes().await?;
        let Some(newest) = plan::newest_serve(&processes) else {
            if !follow {
                bail!("garrison serve was never started in sandbox {name}");
            }
            tokio::time::sleep(SUSPENDED_POLL).await;
            continue;
        };
        let process = newest
            .managed
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        if current.as_deref() != Some(process.as_str()) {
            if current.is_some() {
                eprintln!("-- {process} --");
            }
            current = Some(process.clone());
            printed = 0;
        }
        let key = ProcessKey::Name(process.clone());
        if !follow {
            for line in dp.output(&key).await?.lines {
                writeln!(out, "{}", printable(&line))?;
            }
            return Ok(());
        }
        // Everything so far, then new lines; what was printed before a
        // reconnect is skipped.
        let stream = match dp.follow_output(&key).await {
            Ok(stream) => stream,
            Err(_) => {
                tokio::time::sleep(SUSPENDED_POLL).await;
                continue;
            }
        };
        let mut stream = Box::pin(stream);
        let mut index = 0usize;
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { break };
            index += 1;
            if index > printed {
                writeln!(out, "{}", printable(&event.line))?;
                out.flush()?;
                printed = index;
            }
        }
        // The stream ended: the process exited, or the sandbox went away or
        // to sleep. Look again.
        if let Ok(p) = dp.get_process(&key).await
            && p.status != ProcessState::Running
            && said_ended.as_deref() != Some(process.as_str())
        {
            said_ended = Some(process.clone());
            eprintln!(
                "{process} ended ({}); waiting for `garrison deploy tensorlake` to start another",
                p.status
            );
        }
        tokio::time::sleep(SUSPENDED_POLL).await;
    }
}

/// A line from the sandbox, without terminal control sequences.
pub(super) fn printable(line: &str) -> String {
    line.chars()
        .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
        .collect()
}
