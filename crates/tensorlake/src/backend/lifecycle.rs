//! A sandbox's life on Tensorlake: created under the session's name (a
//! leftover that holds the name makes the create fail, is deleted, and the
//! caller creates again), waited for until it runs, woken before any
//! data-plane call when Tensorlake suspended it for idleness (its
//! `auto_resume` is off, so nothing else would), suspended and resumed on
//! request, and deleted.

use anyhow::anyhow;
use sandbox::{Handle, Result, SandboxError, SandboxName, SandboxSpec};
use tracing::{info, warn};

use super::labels::LABELS_FILE;
use super::network::{LABEL_GATEWAY, gateway_origin};
use super::{KIND, Poll, TRANSITION_GUARD, TensorlakeBackend, check_id, map_err, plain};
use crate::client::{LifecycleChange, MAX_LIFECYCLE_WAIT, found};
use crate::dataplane::SandboxClient;
use crate::error::Error;
use crate::models::{CreateSandbox, Resources, SandboxInfo, SandboxStatus};

impl TensorlakeBackend {
    /// The sandbox as it is now, `Gone` when deleted or terminated.
    async fn info(&self, handle: &Handle) -> Result<SandboxInfo> {
        check_id(&handle.id)?;
        match found(self.client.get_sandbox(&handle.id).await).map_err(map_err)? {
            Some(info) if !info.status.is_final() => Ok(info),
            _ => Err(SandboxError::Gone(format!("sandbox {}", handle.name))),
        }
    }

    /// Waits until the sandbox runs, resuming it if Tensorlake suspended it.
    pub(super) async fn running(&self, handle: &Handle) -> Result<SandboxInfo> {
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        loop {
            let info = self.info(handle).await?;
            match &info.status {
                SandboxStatus::Running => return Ok(info),
                SandboxStatus::Suspended => {
                    info!(sandbox = %handle.name, "resuming a sandbox Tensorlake suspended while its session runs");
                    match self.client.resume_sandbox(&handle.id).await {
                        Ok(()) => {}
                        Err(e) if e.is_conflict() => {}
                        Err(e) => return Err(map_err(e)),
                    }
                }
                _ => {}
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Transient(anyhow!(
                    "sandbox {} stayed {} for {TRANSITION_GUARD:?}",
                    handle.name,
                    info.status
                )));
            }
            poll.wait().await;
        }
    }

    /// The data-plane client of the sandbox if it runs now, `None` while it
    /// is pending, suspended or in transition: for following a session's
    /// output without waking its sandbox. `Gone` once it is deleted.
    pub async fn sandbox_if_running(&self, handle: &Handle) -> Result<Option<SandboxClient>> {
        let info = self.info(handle).await?;
        if info.status != SandboxStatus::Running {
            return Ok(None);
        }
        self.client
            .sandbox(&info.sandbox_id, info.sandbox_url.as_deref())
            .map(Some)
            .map_err(map_err)
    }

    /// The data-plane client of a running sandbox.
    pub(super) async fn dataplane(&self, handle: &Handle) -> Result<SandboxClient> {
        let info = self.running(handle).await?;
        self.client
            .sandbox(&info.sandbox_id, info.sandbox_url.as_deref())
            .map_err(map_err)
    }

    /// Creates Garrison's directories and writes the labels.
    async fn prepare(&self, handle: &Handle) -> Result<()> {
        let dp = self.dataplane(handle).await?;
        let root = self.root(&handle.id);
        self.run_ok(
            &dp,
            &[
                "mkdir",
                "-p",
                "-m",
                "700",
                &handle.workdir,
                &handle.state_dir,
                &handle.bin_dir,
                &handle.home,
            ],
        )
        .await?;
        let labels =
            serde_json::to_vec(&handle.labels).map_err(|e| SandboxError::Fatal(e.into()))?;
        dp.put_file(&format!("{root}/{LABELS_FILE}"), &labels)
            .await
            .map_err(map_err)
    }

    async fn wait_created(&self, handle: &Handle) -> Result<()> {
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        loop {
            let info = self.info(handle).await.map_err(|e| match e {
                SandboxError::Gone(_) => {
                    SandboxError::Fatal(anyhow!("sandbox {} ended while starting", handle.name))
                }
                other => other,
            })?;
            match info.status {
                SandboxStatus::Running => return Ok(()),
                SandboxStatus::Pending | SandboxStatus::Unknown(_)
                    if tokio::time::Instant::now() < deadline =>
                {
                    poll.wait().await
                }
                other => {
                    return Err(SandboxError::Fatal(anyhow!(
                        "sandbox {} is {other} instead of running",
                        handle.name
                    )));
                }
            }
        }
    }

    /// After a create refused because the name is taken: the holder is a
    /// leftover of this session (the caller holds its claim and found no
    /// sandbox under that name, so one made by a create whose answer was
    /// lost), so it is deleted and the create is for the caller to retry.
    async fn clear_name(&self, name: &SandboxName, refused: Error) -> SandboxError {
        let holder = match self.client.find_by_name(name.as_str()).await {
            Ok(holder) => holder,
            Err(e) => return map_err(e),
        };
        if let Some(info) = holder
            && plain(&info.sandbox_id)
        {
            warn!(sandbox = %name, id = info.sandbox_id, "deleting a leftover sandbox that holds the session's name");
            if let Err(e) = found(self.client.delete_sandbox(&info.sandbox_id).await) {
                return map_err(e);
            }
        }
        SandboxError::Transient(anyhow!(
            "sandbox name {name} was taken ({refused}); the leftover was deleted, create again"
        ))
    }

    /// Suspends (`target` suspended) or resumes (running) and waits for it,
    /// asking again when a request is refused mid-transition (409).
    pub(super) async fn transition(&self, handle: &Handle, target: SandboxStatus) -> Result<()> {
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        let mut asked = false;
        loop {
            let info = self.info(handle).await?;
            if info.status == target {
                return Ok(());
            }
            let settled = matches!(
                info.status,
                SandboxStatus::Running | SandboxStatus::Suspended
            );
            if settled && !asked {
                let change = if target == SandboxStatus::Suspended {
                    LifecycleChange::Suspend
                } else {
                    LifecycleChange::Resume
                };
                // The service answers once done (or its wait ran out: then
                // the polling below goes on).
                let request = self
                    .client
                    .change_and_wait(&handle.id, change, MAX_LIFECYCLE_WAIT)
                    .await;
                match request {
                    Ok(_) => asked = true,
                    Err(e) if e.is_conflict() => {}
                    Err(e) => return Err(map_err(e)),
                }
            } else if settled && asked && info.status != target {
                // Something else moved it back (an idle suspend): ask again.
                asked = false;
                continue;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Transient(anyhow!(
                    "sandbox {} did not become {target} (it is {})",
                    handle.name,
                    info.status
                )));
            }
            poll.wait().await;
        }
    }
}

pub(super) async fn create(backend: &TensorlakeBackend, spec: &SandboxSpec) -> Result<Handle> {
    let network = backend.network(spec)?;
    let snapshot_id = match &spec.restore_from {
        Some(s) => {
            let id = s.id_for(KIND)?;
            check_id(id)?;
            Some(id.to_owned())
        }
        None => None,
    };
    let image = spec.image.clone().or(backend.config.default_image.clone());
    let request = CreateSandbox {
        image: image.clone(),
        resources: Resources {
            cpus: spec.resources.cpus,
            memory_mb: spec.resources.memory_mb,
            disk_mb: Some(spec.resources.disk_mb),
        },
        timeout_secs: Some(backend.config.timeout_secs),
        network,
        snapshot_id: snapshot_id.clone(),
        name: Some(spec.name.to_string()),
        auto_resume: Some(false),
    };
    // The service answers once the sandbox runs, or `timeout` with it left
    // queued (waited for below: creating again would only meet the name),
    // or `failed`.
    let created = match backend.client.create_sandbox(&request).await {
        Ok(created) => created,
        Err(e) if e.is_not_found() && snapshot_id.is_some() => {
            return Err(SandboxError::Gone(format!(
                "snapshot {}",
                snapshot_id.unwrap_or_default()
            )));
        }
        Err(e) if e.is_conflict() => return Err(backend.clear_name(&spec.name, e).await),
        Err(e) => return Err(map_err(e)),
    };
    check_id(&created.sandbox_id)?;
    if created.status == SandboxStatus::Failed {
        let handle = backend.handle_for(
            &created.sandbox_id,
            spec.name.as_str(),
            spec.labels.clone(),
            image,
        );
        // A failed sandbox keeps its name until deleted.
        let _ = destroy(backend, &handle).await;
        return Err(SandboxError::Fatal(anyhow!(
            "sandbox {} failed to start: {}",
            spec.name,
            failure_reason(&created)
        )));
    }
    let mut labels = spec.labels.clone();
    if let Some(origin) = spec.network.gateway_url.as_deref().and_then(gateway_origin) {
        labels.insert(LABEL_GATEWAY.to_owned(), origin);
    }
    backend.save_labels(&spec.name, &labels);
    let handle = backend.handle_for(&created.sandbox_id, spec.name.as_str(), labels, image);
    let ready = async {
        backend.wait_created(&handle).await?;
        backend.prepare(&handle).await
    };
    if let Err(e) = ready.await {
        // Leave nothing behind a failed create.
        let _ = destroy(backend, &handle).await;
        return Err(e);
    }
    Ok(handle)
}

/// What a failed create says about why, for the error.
fn failure_reason(created: &crate::models::CreatedSandbox) -> String {
    let details =
        created
            .error_details
            .as_ref()
            .map(|d| match d.get("message").and_then(|m| m.as_str()) {
                Some(message) => message.to_owned(),
                None => d.to_string(),
            });
    [created.termination_reason.clone(), details]
        .into_iter()
        .flatten()
        .map(|s| s.chars().take(512).collect::<String>())
        .collect::<Vec<_>>()
        .join(": ")
}

pub(super) async fn destroy(backend: &TensorlakeBackend, handle: &Handle) -> Result<()> {
    check_id(&handle.id)?;
    backend.readers.forget_sandbox(&handle.id);
    found(backend.client.delete_sandbox(&handle.id).await).map_err(map_err)?;
    if let Some(name) = SandboxName::parse(&handle.name) {
        let _ = std::fs::remove_file(backend.labels_path(&name));
    }
    Ok(())
}
