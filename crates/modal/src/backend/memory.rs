//! Suspend and resume keeping memory, as Modal's client does it: suspend
//! takes a memory snapshot on the sandbox's command router
//! (`TaskSnapshotMemory`, which answers once the snapshot is taken; the
//! sandbox is created with `enable_snapshot`) and ends the sandbox, so a
//! sleeping session costs nothing; resume restores the snapshot
//! (`SandboxRestoreV2`) into a new sandbox under the same name, whose
//! processes carry on where they stopped.
//!
//! Since the restored sandbox has a new id, the backend keeps a record per
//! sleeping session (see [`super::sleeping`]) and resolves the sandbox a
//! handle means through it: the handle's own while it runs, else the one its
//! snapshot was restored into. Restoring under the handle's name keeps the
//! session findable by name in Modal's listing once it runs again, and lets
//! a resume find a restore whose answer was lost (or that a crash kept from
//! being recorded) instead of restoring twice.

use anyhow::anyhow;
use sandbox::{Handle, Result, SandboxError};

use super::listing::tags;
use super::sleeping::{self, Sleeping};
use super::{ModalBackend, app_name_for, status_error};
use crate::wire;

/// How long one memory snapshot may take (the official client's deadline).
const SNAPSHOT_SECS: u64 = 300;

impl ModalBackend {
    /// Where sleeping sessions are recorded; `None` when suspending with
    /// memory is off.
    fn memory_dir(&self) -> Result<&std::path::Path> {
        self.settings
            .memory_records
            .as_deref()
            .ok_or(SandboxError::Unsupported("suspend"))
    }

    /// The record of `name`, if memory snapshots are on and there is one.
    fn sleeping(&self, name: &str) -> Result<Option<Sleeping>> {
        match self.settings.memory_records.as_deref() {
            Some(dir) => sleeping::load(dir, name).map_err(SandboxError::Fatal),
            None => Ok(None),
        }
    }

    /// The running sandbox named as the handle's, in its outpost's app.
    async fn running_named(&self, handle: &Handle) -> Result<Option<String>> {
        let outpost = handle
            .labels
            .get(sandbox::LABEL_OUTPOST_ID)
            .map_or("default", String::as_str);
        let request = wire::SandboxGetFromNameRequest {
            sandbox_name: handle.name.clone(),
            environment_name: self.settings.environment.clone().unwrap_or_default(),
            app_name: app_name_for(outpost),
            include_terminated: false,
        };
        match self
            .client
            .retrying("SandboxGetFromNameV2", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_get_from_name_v2(request).await }
            })
            .await
        {
            Ok(found) if found.metadata.as_ref().is_none_or(|m| m.result.is_none()) => {
                Ok(Some(found.sandbox_id))
            }
            Ok(_) => Ok(None),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(status_error("looking up the sandbox by name", s)),
        }
    }

    /// The sandbox and running task `handle` means now: its own, else the
    /// one its memory snapshot was restored into.
    pub(super) async fn current(&self, handle: &Handle) -> Result<(String, String)> {
        match self.task_id(&handle.id).await {
            Ok(task) => Ok((handle.id.clone(), task)),
            Err(gone) if gone.is_gone() => {
                let Some(restored) = self.sleeping(&handle.name)?.and_then(|r| r.restored) else {
                    return Err(gone);
                };
                if restored == handle.id {
                    return Err(gone);
                }
                let task = self.task_id(&restored).await?;
                Ok((restored, task))
            }
            Err(e) => Err(e),
        }
    }

    /// The running task of the sandbox `handle` means now.
    pub(super) async fn handle_task(&self, handle: &Handle) -> Result<String> {
        self.current(handle).await.map(|(_, task)| task)
    }

    /// The sandbox `handle`'s memory snapshot was restored into, other than
    /// the handle's own: destroy ends it too.
    pub(super) fn restored_elsewhere(&self, handle: &Handle) -> Result<Option<String>> {
        Ok(self
            .sleeping(&handle.name)?
            .and_then(|r| r.restored)
            .filter(|id| *id != handle.id))
    }

    /// Forgets a destroyed session's record (Modal has no call to delete a
    /// memory snapshot; it expires on Modal's side).
    pub(super) fn forget_sleeping(&self, handle: &Handle) -> Result<()> {
        match self.settings.memory_records.as_deref() {
            Some(dir) => sleeping::remove(dir, &handle.name).map_err(SandboxError::Fatal),
            None => Ok(()),
        }
    }

    /// The handles of sessions sleeping in a memory snapshot that `listed`
    /// (Modal's running sandboxes) does not hold.
    pub(super) fn sleeping_handles(&self, listed: &[Handle]) -> Result<Vec<Handle>> {
        match self.settings.memory_records.as_deref() {
            Some(dir) => {
                let records = sleeping::load_all(dir).map_err(SandboxError::Fatal)?;
                Ok(sleeping::sleeping_handles(records, listed))
            }
            None => Ok(Vec::new()),
        }
    }
}

pub(super) async fn suspend(backend: &ModalBackend, handle: &Handle) -> Result<()> {
    let dir = backend.memory_dir()?.to_owned();
    let (sandbox_id, task_id) = backend.current(handle).await?;
    let current_tags = backend.tags_of(&sandbox_id).await?;
    let request = wire::router::TaskSnapshotMemoryRequest {
        task_id: task_id.clone(),
        idempotency_key: format!("{:032x}", rand::random::<u128>()),
    };
    let snapshot_id = backend
        .client
        .routed("TaskSnapshotMemory", &task_id, |mut rpc| {
            let mut request = tonic::Request::new(request.clone());
            request.set_timeout(std::time::Duration::from_secs(SNAPSHOT_SECS));
            async move { rpc.task_snapshot_memory(request).await }
        })
        .await
        .map_err(|s| status_error("taking the sandbox's memory snapshot", s))?
        .snapshot_id;
    if snapshot_id.is_empty() {
        return Err(SandboxError::Transient(anyhow!(
            "Modal answered a memory snapshot without its id"
        )));
    }
    // Recorded before the sandbox is ended, so a crash in between leaves a
    // session that can still be resumed.
    let record = Sleeping {
        snapshot_id,
        handle: handle.clone(),
        tags: current_tags,
        restored: None,
    };
    sleeping::save(&dir, &record).map_err(SandboxError::Fatal)?;
    // A memory snapshot ends the sandbox on Modal; terminating (and waiting
    // for the end) makes sure, so that nothing but a restore runs under
    // the name afterwards.
    super::lifecycle::end(backend, &sandbox_id).await
}

pub(super) async fn resume(backend: &ModalBackend, handle: &Handle) -> Result<()> {
    let dir = backend.memory_dir()?.to_owned();
    let Some(mut record) = backend.sleeping(&handle.name)? else {
        return Err(SandboxError::Gone(format!(
            "sandbox {} has no memory snapshot",
            handle.name
        )));
    };
    if let Some(restored) = &record.restored {
        // Restored already (a resume repeated after a crash): running is
        // enough, with its tags; an ended one cannot be restored again.
        backend.task_id(restored).await?;
        return backend.set_tags(restored, tags(&record.tags)).await;
    }
    // A restore whose answer was lost, or not recorded before a crash,
    // left the session running under its name: that sandbox is the one.
    let suspended = [handle.id.as_str(), record.handle.id.as_str()];
    let adoptable = |found: Option<String>| found.filter(|id| !suspended.contains(&id.as_str()));
    let restored_id = match adoptable(backend.running_named(handle).await?) {
        Some(running) => running,
        None => match restore(backend, handle, &record.snapshot_id).await {
            Ok(id) => id,
            Err(e) => adoptable(backend.running_named(handle).await?).ok_or(e)?,
        },
    };
    record.restored = Some(restored_id.clone());
    sleeping::save(&dir, &record).map_err(SandboxError::Fatal)?;
    backend.set_tags(&restored_id, tags(&record.tags)).await?;
    backend.task_id(&restored_id).await?;
    Ok(())
}

/// Restores the memory snapshot under the handle's name; the new sandbox's id.
async fn restore(backend: &ModalBackend, handle: &Handle, snapshot_id: &str) -> Result<String> {
    use wire::sandbox_restore_request::SandboxNameOverrideType;
    let request = wire::SandboxRestoreV2Request {
        snapshot_id: snapshot_id.to_owned(),
        sandbox_name_override: handle.name.clone(),
        sandbox_name_override_type: SandboxNameOverrideType::String as i32,
    };
    backend
        .client
        .retrying_creation("SandboxRestoreV2", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_restore_v2(request).await }
        })
        .await
        .map_err(|s| match s.code() {
            tonic::Code::NotFound | tonic::Code::FailedPrecondition => SandboxError::Gone(format!(
                "restoring the memory snapshot: Modal said {}",
                s.message()
            )),
            _ => status_error("restoring the memory snapshot", s),
        })
        .map(|restored| restored.sandbox_id)
}
