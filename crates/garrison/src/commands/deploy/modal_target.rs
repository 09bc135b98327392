//! The I/O of `garrison deploy modal`: the settings resolved as serve
//! resolves them, then the Secret, the sandbox and the copy, driven by the
//! decisions of [`super::modal_plan`]; the read-only modes are in
//! [`super::modal_watch`].

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use modal::{Client, wire};
use orchestrator::settings::{HostEnv, ServeConfig};
use tonic::Code;

use super::ModalDeployArgs;
use super::modal_access::{
    HELPER_OUTPUT, TRANSITION_GUARD, app_id, client_for, environment_of, helper, modal_only, now,
    read_log, running, serve_state, sh, task_id, terminate_sandbox,
};
use super::modal_plan::{self as plan, Step};
use super::modal_watch::{logs, status, terminate};
use super::tensorlake_target::{ServeCli, printable};
use crate::backends;

/// Tag naming the deployment on its sandbox.
const TAG_DEPLOY: &str = "garrison.deploy";

pub(super) async fn run(args: ModalDeployArgs) -> anyhow::Result<()> {
    plan::check_name(&args.name).map_err(anyhow::Error::msg)?;
    if args.status || args.logs || args.terminate {
        let settings = modal_only(&args)?;
        let client = client_for(&settings)?;
        let environment = environment_of(&settings);
        if args.status {
            let code = status(&client, &environment, &args.name).await?;
            if code != 0 {
                std::io::stdout().flush()?;
                std::process::exit(code);
            }
            return Ok(());
        }
        if args.logs {
            return logs(&client, &environment, &args.name, args.follow).await;
        }
        return terminate(&client, &environment, &args.name).await;
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

async fn ensure(args: &ModalDeployArgs, resolved: &Resolved) -> anyhow::Result<()> {
    let modal = plan::modal_settings(&resolved.config)
        .context("no outpost is served with the modal backend")?;
    let client = client_for(modal)?;
    let environment = environment_of(modal);
    let app = app_id(&client, &environment, &args.name, true)
        .await?
        .context("Modal returned no app")?;
    let found = running(&client, &environment, &app).await?;
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
    let env = plan::serve_env(&resolved.config, &resolved.host_vars, &args.name)
        .map_err(anyhow::Error::msg)?;
    let secret = plan::secret_name(&args.name);
    let secret_id = modal::secret::put(&client, &secret, &environment, &env)
        .await
        .map_err(|s| anyhow::anyhow!("writing Modal Secret {secret}: {}", s.message()))?;
    println!("wrote Modal Secret {secret} ({} variables)", env.len());
    // SandboxCreateV2, as Modal's client creates sandboxes (and the
    // backend its session sandboxes).
    let request = wire::SandboxCreateV2Request {
        app_id: app,
        definition: Some(wire::Sandbox {
            entrypoint_args: plan::entrypoint(resolved.config_file.is_some(), &args.serve_args),
            image_id: image,
            secret_ids: vec![secret_id],
            resources: Some(wire::Resources {
                memory_mb: args.memory_mb,
                milli_cpu: (args.cpus * 1000.0).round().clamp(1.0, u32::MAX as f64) as u32,
                ..Default::default()
            }),
            timeout_secs: args.timeout_secs,
            scheduler_placement: (!modal.regions.is_empty()).then(|| wire::SchedulerPlacement {
                regions: modal.regions.clone(),
            }),
            // Open network, no idle timeout, no memory snapshots: the
            // orchestrator runs until its lifetime ends.
            name: Some(args.name.clone()),
            ..Default::default()
        }),
        tags: vec![wire::SandboxTag {
            tag_name: TAG_DEPLOY.to_owned(),
            tag_value: args.name.clone(),
        }],
        secret_sources: Vec::new(),
    };
    let created = match client
        .retrying_creation("SandboxCreateV2", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_create_v2(request).await }
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
