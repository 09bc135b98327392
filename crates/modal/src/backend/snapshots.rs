//! Snapshots: a Modal filesystem snapshot is an image id that a later
//! sandbox starts from (see `lifecycle`), taken through the command router;
//! checking and deleting one are image calls.

use std::time::Duration;

use anyhow::anyhow;
use sandbox::{Handle, Result, Sandbox, SandboxError, SnapshotRef};
use tonic::Code;

use super::{ModalBackend, status_error};
use crate::wire;

/// How long a filesystem snapshot may take on Modal's side per call.
const SNAPSHOT_WAIT_SECS: u64 = 55;

/// Takes a filesystem snapshot through the task's command router
/// (`TaskSnapshotFilesystem`, what Modal's client uses; `SandboxSnapshotFs`
/// is its legacy opt-in). The snapshot id is chosen here so a retried call
/// is the same snapshot. No `ttl_seconds` is sent: the image is kept until
/// the orchestrator's retention sweep deletes it, so Modal never drops a
/// sleeping session's snapshot before Garrison's own retention says so.
pub(super) async fn snapshot(backend: &ModalBackend, handle: &Handle) -> Result<SnapshotRef> {
    let task_id = backend.handle_task(handle).await?;
    let request = wire::router::TaskSnapshotFilesystemRequest {
        task_id: task_id.clone(),
        snapshot_id: format!("{:032x}", rand::random::<u128>()),
        ttl_seconds: None,
    };
    let response = backend
        .client
        .routed("TaskSnapshotFilesystem", &task_id, |mut rpc| {
            let mut request = tonic::Request::new(request.clone());
            request.set_timeout(Duration::from_secs(SNAPSHOT_WAIT_SECS));
            async move { rpc.task_snapshot_filesystem(request).await }
        })
        .await
        .map_err(|s| status_error("snapshotting the sandbox", s))?;
    if response.image_id.is_empty() {
        return Err(SandboxError::Transient(anyhow!(
            "the filesystem snapshot returned no image"
        )));
    }
    Ok(SnapshotRef {
        backend: backend.kind().to_owned(),
        id: response.image_id,
        size_bytes: 0,
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        base_image: handle.image.clone(),
        sha256: None,
        lineage: sandbox::Lineage::from_labels(&handle.labels),
    })
}

pub(super) async fn snapshot_exists(
    backend: &ModalBackend,
    snapshot: &SnapshotRef,
) -> Result<bool> {
    let request = wire::ImageFromIdRequest {
        image_id: snapshot.id.clone(),
    };
    match backend
        .client
        .retrying("ImageFromId", |mut rpc| {
            let request = request.clone();
            async move { rpc.image_from_id(request).await }
        })
        .await
    {
        Ok(_) => Ok(true),
        Err(s) if s.code() == Code::NotFound => Ok(false),
        Err(s) => Err(status_error("looking up the snapshot", s)),
    }
}

pub(super) async fn delete_snapshot(backend: &ModalBackend, snapshot: &SnapshotRef) -> Result<()> {
    let request = wire::ImageDeleteRequest {
        image_id: snapshot.id.clone(),
    };
    match backend
        .client
        .retrying("ImageDelete", |mut rpc| {
            let request = request.clone();
            async move { rpc.image_delete(request).await }
        })
        .await
    {
        Ok(()) => Ok(()),
        Err(s) if s.code() == Code::NotFound => Ok(()),
        Err(s) => Err(status_error("deleting the snapshot", s)),
    }
}
