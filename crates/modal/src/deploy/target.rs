//! The I/O of `garrison deploy modal`: the Secret, the sandbox and the
//! copy, driven by the decisions of [`super::plan`]; the read-only modes
//! are in [`super::watch`].

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use sandbox::plugin::deploy::{DeployOutput, DeployRequest, printable, read_binary, uptime};
use tonic::Code;

use super::access::{
    HELPER_OUTPUT, TRANSITION_GUARD, app_id, client_for, environment_of, helper, now, read_log,
    running, serve_state, sh, task_id, terminate_sandbox,
};
use super::plan::{self, Step};
use crate::{Client, ModalEnv, wire};

/// Tag naming the deployment on its sandbox.
const TAG_DEPLOY: &str = "garrison.deploy";

/// This host's Modal image names (under the state directory the settings
/// resolve to), copied in when present.
fn read_image_cache(state_dir: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    let cache_path = crate::image::ImageCache::path(state_dir);
    match std::fs::read(&cache_path) {
        Ok(bytes) => {
            sandbox::format::MODAL_IMAGES.check(&cache_path, &bytes)?;
            Ok(Some(bytes))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", cache_path.display())),
    }
}

/// Leaves a running deployment alone (finishing a copy a deploy left
/// half done), else writes the Secret, creates the sandbox and copies
/// garrison in.
pub(super) async fn ensure(
    modal: &ModalEnv,
    request: &DeployRequest,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<()> {
    let image_cache = read_image_cache(&request.state_dir)?;
    let client = client_for(modal)?;
    let environment = environment_of(modal);
    let app = app_id(&client, &environment, &request.name, true)
        .await?
        .context("Modal returned no app")?;
    let found = running(&client, &environment, &app).await?;
    if let Step::Keep(found) = plan::step(&found, &request.name) {
        let up = uptime(((now() - found.created_at) * 1000.0) as i64);
        let task = task_id(&client, &found.id).await?;
        // A deploy that stopped between create and copy left a sandbox
        // waiting for its binary: finish its work.
        if let Some(task) = &task
            && serve_state(&client, task).await? == "waiting"
        {
            out.say(&format!(
                "sandbox {} (id {}) waits for garrison; copying it in",
                request.name, found.id
            ));
            install(&client, &found.id, request, image_cache.as_deref()).await?;
            out.say(&format!(
                "started garrison serve in sandbox {}",
                request.name
            ));
            return Ok(());
        }
        out.say(&format!(
            "sandbox {} (id {}) is running, up {up}; nothing to do",
            request.name, found.id
        ));
        return Ok(());
    }
    let names = match &image_cache {
        Some(bytes) => serde_json::from_slice(bytes).context("reading the Modal image names")?,
        None => crate::image::ImageCache::default(),
    };
    let image = plan::orchestrator_image(request.image.as_deref(), modal, &names)
        .map_err(anyhow::Error::msg)?;
    let env = plan::serve_env(modal, request);
    let secret = plan::secret_name(&request.name);
    let secret_id = crate::secret::put(&client, &secret, &environment, &env)
        .await
        .map_err(|s| anyhow::anyhow!("writing Modal Secret {secret}: {}", s.message()))?;
    out.say(&format!(
        "wrote Modal Secret {secret} ({} variables)",
        env.len()
    ));
    // SandboxCreateV2, as Modal's client creates sandboxes (and the
    // backend its session sandboxes).
    let create = wire::SandboxCreateV2Request {
        app_id: app,
        definition: Some(wire::Sandbox {
            entrypoint_args: plan::entrypoint(request.config_file.is_some(), &request.serve_args),
            image_id: image,
            secret_ids: vec![secret_id],
            resources: Some(wire::Resources {
                // The option is bounded to 32 bits for Modal.
                memory_mb: u32::try_from(request.memory_mb).unwrap_or(u32::MAX),
                milli_cpu: (request.cpus * 1000.0).round().clamp(1.0, u32::MAX as f64) as u32,
                ..Default::default()
            }),
            // The option is bounded to Modal's 24 hours.
            timeout_secs: u32::try_from(request.timeout_secs).unwrap_or(u32::MAX),
            scheduler_placement: (!modal.regions.is_empty()).then(|| wire::SchedulerPlacement {
                regions: modal.regions.clone(),
            }),
            // Open network, no idle timeout, no memory snapshots: the
            // orchestrator runs until its lifetime ends.
            name: Some(request.name.clone()),
            ..Default::default()
        }),
        tags: vec![wire::SandboxTag {
            tag_name: TAG_DEPLOY.to_owned(),
            tag_value: request.name.clone(),
        }],
        secret_sources: Vec::new(),
    };
    let created = match client
        .retrying_creation("SandboxCreateV2", |mut rpc| {
            let create = create.clone();
            async move { rpc.sandbox_create_v2(create).await }
        })
        .await
    {
        Ok(created) => created,
        Err(s) if s.code() == Code::AlreadyExists => {
            // Another deploy (a keep-alive tick) made it meanwhile.
            out.say(&format!(
                "sandbox {} was created meanwhile; nothing to do",
                request.name
            ));
            return Ok(());
        }
        Err(s) => bail!("creating sandbox {}: {}", request.name, s.message()),
    };
    let id = created.sandbox_id;
    out.say(&format!("created sandbox {} (id {id})", request.name));
    if let Err(e) = install(&client, &id, request, image_cache.as_deref()).await {
        // Leave nothing behind that waits for a binary forever.
        let _ = terminate_sandbox(&client, &id).await;
        return Err(e);
    }
    out.say(&format!(
        "started garrison serve in sandbox {} (id {id})",
        request.name
    ));
    Ok(())
}

/// Copies the binary, the settings file and the image names in, then waits
/// for the entry point to start serve.
async fn install(
    client: &Client,
    sandbox_id: &str,
    request: &DeployRequest,
    image_cache: Option<&[u8]>,
) -> anyhow::Result<()> {
    let task = task_id(client, sandbox_id)
        .await?
        .context("the sandbox ended before garrison was copied in")?;
    if let Some(text) = &request.config_file {
        put(client, &task, plan::CONFIG_FILE, "600", text).await?;
    }
    if let Some(bytes) = image_cache {
        put(client, &task, plan::IMAGE_CACHE, "600", bytes).await?;
    }
    let bytes = read_binary(request.binary.as_deref()).await?;
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
