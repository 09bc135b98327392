//! A Modal Sandbox's life: the outpost's app found or made once, the image
//! resolved (a snapshot's image id when restoring, else a configured id or
//! a name built earlier), the sandbox created with its resources, regions,
//! timeout, network access, name and tags, then prepared (Garrison's
//! directories) and tagged with its root; a half-made one is terminated.
//! Destroying waits for the sandbox to stop, since Modal terminates
//! asynchronously.

use anyhow::anyhow;
use sandbox::{Handle, Result, SandboxError, SandboxSpec};
use tonic::Code;
use tracing::warn;

use super::listing::{TAG_ROOT, tags};
use super::{DEFAULT_IMAGE, ModalBackend, app_name_for, handle_for, status_error};
use crate::exec::{self, Command};
use crate::image;
use crate::scripts;
use crate::wire;

/// `SandboxWait` calls after a terminate, and how long each may wait.
const TERMINATE_WAITS: u32 = 3;
const TERMINATE_WAIT_SECS: f32 = 20.0;

impl ModalBackend {
    /// The id of the app `app_name`, made if missing.
    pub(super) async fn app_id(&self, app_name: &str) -> Result<String> {
        if let Some(id) = self.apps.lock().unwrap().get(app_name) {
            return Ok(id.clone());
        }
        let request = wire::AppGetOrCreateRequest {
            app_name: app_name.to_owned(),
            environment_name: self.settings.environment.clone().unwrap_or_default(),
            object_creation_type: wire::ObjectCreationType::CreateIfMissing as i32,
        };
        let id = self
            .client
            .retrying("AppGetOrCreate", |mut rpc| {
                let request = request.clone();
                async move { rpc.app_get_or_create(request).await }
            })
            .await
            .map(|r| r.app_id)
            .map_err(|s| status_error("looking up the Modal app", s))?;
        self.apps
            .lock()
            .unwrap()
            .insert(app_name.to_owned(), id.clone());
        Ok(id)
    }

    /// The image id for a configured image id or name.
    fn image_id(&self, wanted: Option<&str>) -> Result<String> {
        let wanted = wanted
            .or(self.settings.image.as_deref())
            .unwrap_or(DEFAULT_IMAGE);
        if image::is_image_id(wanted) {
            return Ok(wanted.to_owned());
        }
        let missing = || {
            SandboxError::Fatal(anyhow!(
                "no Modal image named {wanted:?}: build it with \
                 `garrison image build {wanted} --backend modal`, or set MODAL_IMAGE to an image id"
            ))
        };
        let path = self.settings.image_cache.as_deref().ok_or_else(missing)?;
        let cache = image::ImageCache::load(path).map_err(SandboxError::Fatal)?;
        cache
            .image_for(wanted)
            .map(str::to_owned)
            .ok_or_else(missing)
    }

    pub(super) async fn terminate(&self, sandbox_id: &str) -> Result<()> {
        let request = wire::SandboxTerminateRequest {
            sandbox_id: sandbox_id.to_owned(),
        };
        match self
            .client
            .retrying("SandboxTerminateV2", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_terminate_v2(request).await }
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(status_error("terminating the sandbox", s)),
        }
    }

    /// Creates the layout and returns the absolute root inside the sandbox.
    async fn prepare(&self, sandbox_id: &str) -> Result<String> {
        let task = self.task_id(sandbox_id).await?;
        let argv = scripts::sh(scripts::SETUP, []);
        let finished = exec::run(
            &self.client,
            &task,
            &Command {
                argv,
                ..Command::default()
            },
            None,
            4096,
        )
        .await
        .map_err(|s| status_error("preparing the sandbox", s))?;
        let root = String::from_utf8_lossy(&finished.output).trim().to_owned();
        if finished.exit_code != 0 || !root.starts_with('/') || root.contains('\n') {
            return Err(SandboxError::Fatal(anyhow!(
                "preparing the sandbox failed ({}): {}",
                finished.exit_code,
                finished.message()
            )));
        }
        Ok(root)
    }
}

pub(super) async fn create(backend: &ModalBackend, spec: &SandboxSpec) -> Result<Handle> {
    let image = match &spec.restore_from {
        Some(snapshot) => snapshot.id_for("modal")?.to_owned(),
        None => backend.image_id(spec.image.as_deref())?,
    };
    let outpost = spec
        .labels
        .get(sandbox::LABEL_OUTPOST_ID)
        .map_or("default", String::as_str);
    let app_id = backend.app_id(&app_name_for(outpost)).await?;
    // The gateway URL rides along as a label (and tag), so a policy changed
    // later still allows it.
    let mut labels = spec.labels.clone();
    if let Some(gateway) = &spec.network.gateway_url {
        labels.insert(super::network::LABEL_GATEWAY.to_owned(), gateway.clone());
    }
    let definition = wire::Sandbox {
        entrypoint_args: scripts::entrypoint(),
        image_id: image.clone(),
        // Session sandboxes get no Secret: their environment is the spawn
        // contract's, set per process.
        secret_ids: Vec::new(),
        resources: Some(wire::Resources {
            memory_mb: u32::try_from(spec.resources.memory_mb).unwrap_or(u32::MAX),
            milli_cpu: (spec.resources.cpus * 1000.0)
                .round()
                .clamp(1.0, u32::MAX as f64) as u32,
            memory_mb_max: 0,
            milli_cpu_max: 0,
        }),
        timeout_secs: backend.settings.timeout.as_secs() as u32,
        workdir: None,
        block_network: false,
        scheduler_placement: (!backend.settings.regions.is_empty()).then(|| {
            wire::SchedulerPlacement {
                regions: backend.settings.regions.clone(),
            }
        }),
        network_access: Some(backend.network_access(spec)),
        name: Some(spec.name.to_string()),
        // Memory snapshots need it (`backend::memory`).
        enable_snapshot: backend.settings.memory_records.is_some(),
        runtime: backend.settings.runtime.map(|r| r.as_str().to_owned()),
        idle_timeout_secs: backend
            .settings
            .idle_timeout
            .map(|t| u32::try_from(t.as_secs()).unwrap_or(u32::MAX)),
    };
    // What Modal's client uses by default (`sandbox_v2`): the answer carries
    // the task, so the sandbox is ready for processes at once. Its retries
    // carry the same x-idempotency-key, so a lost answer makes no second one.
    let request = wire::SandboxCreateV2Request {
        app_id,
        definition: Some(definition),
        tags: tags(&labels),
        secret_sources: Vec::new(),
    };
    let created = backend
        .client
        .retrying_creation("SandboxCreateV2", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_create_v2(request).await }
        })
        .await
        .map_err(|s| match s.code() {
            Code::AlreadyExists => {
                SandboxError::Fatal(anyhow!("sandbox {} exists already", spec.name))
            }
            Code::NotFound if spec.restore_from.is_some() => {
                SandboxError::Gone(format!("snapshot image {image}: {}", s.message()))
            }
            _ => status_error("creating the sandbox", s),
        })?;
    let sandbox_id = created.sandbox_id;
    let ready = async {
        let root = backend.prepare(&sandbox_id).await?;
        let mut all = tags(&labels);
        all.push(wire::SandboxTag {
            tag_name: TAG_ROOT.to_owned(),
            tag_value: root.clone(),
        });
        backend.set_tags(&sandbox_id, all).await?;
        Ok::<_, SandboxError>(root)
    }
    .await;
    match ready {
        Ok(root) => Ok(handle_for(
            sandbox_id,
            spec.name.to_string(),
            Some(image),
            &root,
            labels.clone(),
        )),
        Err(e) => {
            // Leave nothing behind that the caller does not know about.
            if let Err(t) = backend.terminate(&sandbox_id).await {
                warn!(sandbox_id, error = %t, "terminating a half-made sandbox failed");
            }
            Err(e)
        }
    }
}

pub(super) async fn destroy(backend: &ModalBackend, handle: &Handle) -> Result<()> {
    // A session resumed from a memory snapshot runs in the restored sandbox.
    if let Some(restored) = backend.restored_elsewhere(handle)? {
        end(backend, &restored).await?;
    }
    end(backend, &handle.id).await?;
    backend.forget_sleeping(handle)
}

/// Terminates a sandbox and waits until it has stopped.
pub(super) async fn end(backend: &ModalBackend, sandbox_id: &str) -> Result<()> {
    backend.terminate(sandbox_id).await?;
    // Termination is asynchronous on Modal's side: wait for the result,
    // so that nothing of the sandbox runs once destroy has returned.
    for _ in 0..TERMINATE_WAITS {
        let request = wire::SandboxWaitRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: TERMINATE_WAIT_SECS,
        };
        match backend
            .client
            .retrying("SandboxWaitV2", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_wait_v2(request).await }
            })
            .await
        {
            Ok(response) if response.result.is_some() => return Ok(()),
            Ok(_) => {}
            Err(s) if s.code() == Code::NotFound => return Ok(()),
            Err(s) => return Err(status_error("waiting for the sandbox to stop", s)),
        }
    }
    Err(SandboxError::Transient(anyhow!(
        "sandbox {sandbox_id} was terminated but has not stopped yet"
    )))
}
