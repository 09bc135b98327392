//! The I/O of `garrison deploy modal`: Modal's app, Secret, sandbox and
//! exec calls, driven by the decisions of [`super::modal_plan`].

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use modal::exec::{self, Command, Finished};
use modal::{Client, ClientConfig, ModalEnv, RetryPolicy, wire};
use orchestrator::settings::{self, BackendSource, HostEnv, RawSettings, ServeConfig};
use tonic::Code;

use super::ModalDeployArgs;
use super::modal_plan::{self as plan, Found, Step};
use super::tensorlake_target::{ServeCli, printable};
use crate::backends;

/// Bounds a wait for a state change; never an expectation of speed.
const TRANSITION_GUARD: Duration = Duration::from_secs(600);
/// How often the log is looked at while following it.
const FOLLOW_POLL: Duration = Duration::from_secs(1);
/// Exit status of `--status` when serve is not running.
const NOT_RUNNING: i32 = 3;
/// The Modal environment (`""`: the profile's default).
const ENVIRONMENT: &str = "";
/// Tag naming the deployment on its sandbox.
const TAG_DEPLOY: &str = "garrison.deploy";
/// Output kept from a helper command.
const HELPER_OUTPUT: usize = 64 * 1024;
/// Bytes of log read per exec.
const LOG_CHUNK: usize = 1024 * 1024;

pub async fn run(args: ModalDeployArgs) -> anyhow::Result<()> {
    plan::check_name(&args.name).map_err(anyhow::Error::msg)?;
    if args.status || args.logs || args.terminate {
        let client = client_for(&modal_only(&args)?)?;
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
    super::plan::check_serve_args(&args.serve_args).map_err(anyhow::Error::msg)?;
    let resolved = resolve(&args)?;
    ensure(&args, &resolved).await
}

/// What deploying needs from the settings.
struct Resolved {
    config: ServeConfig,
    /// The settings file to copy in.
    config_file: Option<Vec<u8>>,
    /// This host's Modal image names, copied in when present.
    image_cache: Option<Vec<u8>>,
    host_vars: BTreeMap<String, String>,
}

/// Resolves the settings exactly as the deployed `garrison serve --backend
/// modal <SERVE_ARGS>` will, so that a mistake is reported here rather
/// than inside the sandbox.
fn resolve(args: &ModalDeployArgs) -> anyhow::Result<Resolved> {
    let mut argv: Vec<String> = vec!["serve".into(), "--backend".into(), "modal".into()];
    let config_path = backends::settings_file(&HostEnv::current(), args.config.as_deref());
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
    let cache_path = modal::image::ImageCache::path(&config.state_dir);
    let image_cache = match std::fs::read(&cache_path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", cache_path.display())),
    };
    Ok(Resolved {
        config,
        config_file,
        image_cache,
        host_vars: HostEnv::current().vars,
    })
}

/// The Modal settings alone: `--status`, `--logs` and `--terminate` need
/// no Devin token.
fn modal_only(args: &ModalDeployArgs) -> anyhow::Result<ModalEnv> {
    let host = HostEnv::current();
    let file = match backends::settings_file(&host, args.config.as_deref()) {
        Some(path) => settings::load_file(&path, &backends::ALL)?.unwrap_or_default(),
        None => RawSettings::default(),
    };
    Ok(modal::settings::resolve(&BackendSource::new(
        &host,
        &file.backend_keys,
    ))?)
}

fn client_for(modal: &ModalEnv) -> anyhow::Result<Client> {
    Client::new(&ClientConfig {
        api_url: modal.api_url.clone(),
        credentials: modal.credentials.clone(),
        retry: RetryPolicy::default(),
    })
}

/// The deployment's app id; with `create`, made if missing, else `None`
/// when there is none.
async fn app_id(client: &Client, name: &str, create: bool) -> anyhow::Result<Option<String>> {
    let creation = if create {
        wire::ObjectCreationType::CreateIfMissing
    } else {
        wire::ObjectCreationType::Unspecified
    };
    let request = wire::AppGetOrCreateRequest {
        app_name: name.to_owned(),
        environment_name: ENVIRONMENT.to_owned(),
        object_creation_type: creation as i32,
    };
    match client
        .retrying("AppGetOrCreate", |mut rpc| {
            let request = request.clone();
            async move { rpc.app_get_or_create(request).await }
        })
        .await
    {
        Ok(r) => Ok(Some(r.app_id)),
        Err(s) if !create && s.code() == Code::NotFound => Ok(None),
        Err(s) => Err(anyhow::anyhow!(
            "looking up Modal app {name}: {}",
            s.message()
        )),
    }
}

/// The running sandboxes of the app.
async fn running(client: &Client, app_id: &str) -> anyhow::Result<Vec<Found>> {
    let request = wire::SandboxListRequest {
        app_id: app_id.to_owned(),
        before_timestamp: 0.0,
        environment_name: ENVIRONMENT.to_owned(),
        include_finished: false,
        tags: Vec::new(),
    };
    let page = client
        .retrying("SandboxList", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_list(request).await }
        })
        .await
        .map_err(|s| anyhow::anyhow!("listing Modal sandboxes: {}", s.message()))?;
    Ok(page
        .sandboxes
        .into_iter()
        .map(|s| Found {
            id: s.id,
            name: s.name,
            created_at: s.created_at,
            timeout_secs: s.timeout_secs,
        })
        .collect())
}

/// The running deployment sandbox, if any.
async fn find(client: &Client, name: &str) -> anyhow::Result<Option<Found>> {
    let Some(app) = app_id(client, name, false).await? else {
        return Ok(None);
    };
    Ok(plan::find(&running(client, &app).await?, name).cloned())
}

/// The task of a running sandbox, waiting while it is scheduled; `None`
/// once it has ended.
async fn task_id(client: &Client, sandbox_id: &str) -> anyhow::Result<Option<String>> {
    let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
    loop {
        let request = wire::SandboxGetTaskIdRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: Some(55.0),
            wait_until_ready: false,
        };
        let response = match client
            .retrying("SandboxGetTaskId", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_get_task_id(request).await }
            })
            .await
        {
            Ok(r) => r,
            Err(s) if s.code() == Code::NotFound => return Ok(None),
            Err(s) => bail!("finding the task of sandbox {sandbox_id}: {}", s.message()),
        };
        if response.task_result.is_some() {
            return Ok(None);
        }
        if let Some(task) = response.task_id {
            return Ok(Some(task));
        }
        if tokio::time::Instant::now() > deadline {
            bail!("sandbox {sandbox_id} was not scheduled within {TRANSITION_GUARD:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs a short helper command in the sandbox's task to completion.
async fn helper(
    client: &Client,
    task: &str,
    argv: Vec<String>,
    stdin: Option<&[u8]>,
    max: usize,
) -> anyhow::Result<Finished> {
    let what = argv.get(2).cloned().unwrap_or_default();
    exec::run(
        client,
        task,
        &Command {
            argv,
            workdir: None,
        },
        stdin,
        max,
    )
    .await
    .map_err(|s| {
        anyhow::anyhow!(
            "running {} in the sandbox: {}",
            what.lines().next().unwrap_or(""),
            s.message()
        )
    })
}

fn sh(script: &str, args: &[&str]) -> Vec<String> {
    modal::scripts::sh(script, args.iter().map(|a| (*a).to_owned()))
}

async fn ensure(args: &ModalDeployArgs, resolved: &Resolved) -> anyhow::Result<()> {
    let modal = plan::modal_settings(&resolved.config)
        .context("no outpost is served with the modal backend")?;
    let client = client_for(modal)?;
    let app = app_id(&client, &args.name, true)
        .await?
        .context("Modal returned no app")?;
    let found = running(&client, &app).await?;
    if let Step::Keep(found) = plan::step(&found, &args.name) {
        let up = super::plan::uptime(((now() - found.created_at) * 1000.0) as i64);
        let task = task_id(&client, &found.id).await?;
        // A deploy that stopped between create and copy left a sandbox
        // waiting for its binary: finish its work.
        if let Some(task) = &task
            && serve_state(&client, task).await? == "waiting"
        {
            println!(
                "sandbox {} (id {}) waits for garrison; copying it in",
                args.name, found.id
            );
            install(&client, &found.id, args, resolved).await?;
            println!("started garrison serve in sandbox {}", args.name);
            return Ok(());
        }
        println!(
            "sandbox {} (id {}) is running, up {up}; nothing to do",
            args.name, found.id
        );
        return Ok(());
    }
    let names = match &resolved.image_cache {
        Some(bytes) => serde_json::from_slice(bytes).context("reading the Modal image names")?,
        None => modal::image::ImageCache::default(),
    };
    let image = plan::orchestrator_image(args.image.as_deref(), modal, &names)
        .map_err(anyhow::Error::msg)?;
    let env = plan::serve_env(&resolved.config, &resolved.host_vars).map_err(anyhow::Error::msg)?;
    let secret = plan::secret_name(&args.name);
    let secret_id = modal::secret::put(&client, &secret, ENVIRONMENT, &env)
        .await
        .map_err(|s| anyhow::anyhow!("writing Modal Secret {secret}: {}", s.message()))?;
    println!("wrote Modal Secret {secret} ({} variables)", env.len());
    let request = wire::SandboxCreateRequest {
        app_id: app,
        definition: Some(wire::Sandbox {
            entrypoint_args: plan::entrypoint(resolved.config_file.is_some(), &args.serve_args),
            image_id: image,
            secret_ids: vec![secret_id],
            resources: Some(wire::Resources {
                memory_mb: args.memory_mb,
                milli_cpu: (args.cpus * 1000.0).round().clamp(1.0, u32::MAX as f64) as u32,
            }),
            timeout_secs: args.timeout_secs,
            workdir: None,
            block_network: false,
            scheduler_placement: (!modal.regions.is_empty()).then(|| wire::SchedulerPlacement {
                regions: modal.regions.clone(),
            }),
            network_access: None,
            name: Some(args.name.clone()),
        }),
        tags: vec![wire::SandboxTag {
            tag_name: TAG_DEPLOY.to_owned(),
            tag_value: args.name.clone(),
        }],
    };
    let created = match client
        .retrying_creation("SandboxCreate", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_create(request).await }
        })
        .await
    {
        Ok(created) => created,
        Err(s) if s.code() == Code::AlreadyExists => {
            // Another deploy (a keep-alive tick) made it meanwhile.
            println!("sandbox {} was created meanwhile; nothing to do", args.name);
            return Ok(());
        }
        Err(s) => bail!("creating sandbox {}: {}", args.name, s.message()),
    };
    let id = created.sandbox_id;
    println!("created sandbox {} (id {id})", args.name);
    if let Err(e) = install(&client, &id, args, resolved).await {
        // Leave nothing behind that waits for a binary forever.
        let _ = terminate_sandbox(&client, &id).await;
        return Err(e);
    }
    println!("started garrison serve in sandbox {} (id {id})", args.name);
    Ok(())
}

/// Copies the binary, the settings file and the image names in, then waits
/// for the entry point to start serve.
async fn install(
    client: &Client,
    sandbox_id: &str,
    args: &ModalDeployArgs,
    resolved: &Resolved,
) -> anyhow::Result<()> {
    let task = task_id(client, sandbox_id)
        .await?
        .context("the sandbox ended before garrison was copied in")?;
    if let Some(text) = &resolved.config_file {
        put(client, &task, plan::CONFIG_FILE, "600", text).await?;
    }
    if let Some(bytes) = &resolved.image_cache {
        put(client, &task, plan::IMAGE_CACHE, "600", bytes).await?;
    }
    let binary = match &args.binary {
        Some(path) => path.clone(),
        None => std::env::current_exe().context("finding this garrison binary")?,
    };
    let bytes = tokio::fs::read(&binary)
        .await
        .with_context(|| format!("reading {}", binary.display()))?;
    // Last: the entry point starts serve as soon as the binary is there.
    put(client, &task, plan::BINARY, "755", &bytes).await?;
    let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
    loop {
        match serve_state(client, &task).await?.as_str() {
            "running" => return Ok(()),
            "gone" => {
                let log = read_log(client, &task, 0).await.unwrap_or_default();
                bail!(
                    "garrison serve ended at once in the sandbox; its output:\n{}",
                    printable(&String::from_utf8_lossy(&log))
                );
            }
            _ => {}
        }
        if tokio::time::Instant::now() > deadline {
            bail!("garrison serve did not start in the sandbox");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn put(
    client: &Client,
    task: &str,
    path: &str,
    mode: &str,
    bytes: &[u8],
) -> anyhow::Result<()> {
    let done = helper(
        client,
        task,
        sh(plan::WRITE, &[path, mode]),
        Some(bytes),
        HELPER_OUTPUT,
    )
    .await?;
    if done.exit_code != 0 {
        bail!(
            "writing {path} in the sandbox failed ({}): {}",
            done.exit_code,
            String::from_utf8_lossy(&done.output).trim()
        );
    }
    Ok(())
}

/// `running`, `waiting` or `gone`, as [`plan::SERVE_STATE`] says.
async fn serve_state(client: &Client, task: &str) -> anyhow::Result<String> {
    let done = helper(
        client,
        task,
        sh(plan::SERVE_STATE, &[]),
        None,
        HELPER_OUTPUT,
    )
    .await?;
    Ok(String::from_utf8_lossy(&done.output).trim().to_owned())
}

async fn read_log(client: &Client, task: &str, offset: u64) -> anyhow::Result<Vec<u8>> {
    let done = helper(
        client,
        task,
        sh(
            plan::READ_LOG,
            &[&offset.to_string(), &LOG_CHUNK.to_string()],
        ),
        None,
        LOG_CHUNK,
    )
    .await?;
    if done.exit_code != 0 {
        bail!("reading the serve log failed ({})", done.exit_code);
    }
    Ok(done.output)
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Prints the state; the exit status for the shell.
async fn status(client: &Client, name: &str) -> anyhow::Result<i32> {
    let Some(found) = find(client, name).await? else {
        println!("sandbox:  none named {name} running (deploy with `garrison deploy modal`)");
        return Ok(NOT_RUNNING);
    };
    let up = super::plan::uptime(((now() - found.created_at) * 1000.0) as i64);
    let left = super::plan::uptime(plan::seconds_left(&found, now()) as i64 * 1000);
    println!(
        "sandbox:  {name} (id {}): running; uptime {up}; {left} left of its lifetime \
         (the keep-alive creates the next one)",
        found.id
    );
    let Some(task) = task_id(client, &found.id).await? else {
        println!("serve:    the sandbox has just ended");
        return Ok(NOT_RUNNING);
    };
    let state = serve_state(client, &task).await?;
    println!(
        "serve:    {}",
        match state.as_str() {
            "running" => "running",
            "waiting" => "not started (the binary was not copied in)",
            "starting" => "starting",
            _ => "ended",
        }
    );
    Ok(if state == "running" { 0 } else { NOT_RUNNING })
}

async fn terminate_sandbox(client: &Client, sandbox_id: &str) -> anyhow::Result<()> {
    let request = wire::SandboxTerminateRequest {
        sandbox_id: sandbox_id.to_owned(),
    };
    match client
        .retrying("SandboxTerminate", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_terminate(request).await }
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == Code::NotFound => Ok(()),
        Err(s) => bail!("terminating sandbox {sandbox_id}: {}", s.message()),
    }
}

async fn terminate(client: &Client, name: &str) -> anyhow::Result<()> {
    match find(client, name).await? {
        Some(found) => {
            terminate_sandbox(client, &found.id).await?;
            println!("terminated sandbox {name} (id {})", found.id);
        }
        None => println!("no sandbox named {name} running; nothing to terminate"),
    }
    let secret = plan::secret_name(name);
    let deleted = modal::secret::delete(client, &secret, ENVIRONMENT)
        .await
        .map_err(|s| anyhow::anyhow!("deleting Modal Secret {secret}: {}", s.message()))?;
    if deleted {
        println!("deleted Modal Secret {secret}");
    }
    Ok(())
}

/// The serve's log; with `follow`, new output as it comes, going on with
/// the next sandbox when the keep-alive creates one.
async fn logs(client: &Client, name: &str, follow: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    let mut current: Option<String> = None;
    let mut offset = 0u64;
    let mut said_waiting = false;
    loop {
        let found = find(client, name).await?;
        let task = match &found {
            Some(found) => task_id(client, &found.id).await?,
            None => None,
        };
        let (Some(found), Some(task)) = (found, task) else {
            if !follow {
                bail!("no sandbox named {name} running");
            }
            if !said_waiting {
                eprintln!(
                    "no sandbox named {name} running; waiting for the keep-alive to create one"
                );
                said_waiting = true;
            }
            tokio::time::sleep(FOLLOW_POLL * 2).await;
            continue;
        };
        said_waiting = false;
        if current.as_deref() != Some(found.id.as_str()) {
            if current.is_some() {
                eprintln!("-- sandbox {} --", found.id);
            }
            current = Some(found.id.clone());
            offset = 0;
        }
        let chunk = match read_log(client, &task, offset).await {
            Ok(chunk) => chunk,
            // The sandbox ended meanwhile: look again.
            Err(_) if follow => {
                tokio::time::sleep(FOLLOW_POLL).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        offset += chunk.len() as u64;
        if !chunk.is_empty() {
            write!(out, "{}", printable_text(&chunk))?;
            out.flush()?;
            if chunk.len() == LOG_CHUNK {
                continue;
            }
        }
        if !follow {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// Log bytes without terminal control sequences, line ends kept.
fn printable_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .split_inclusive('\n')
        .map(|line| match line.strip_suffix('\n') {
            Some(body) => format!("{}\n", printable(body)),
            None => printable(line),
        })
        .collect()
}
