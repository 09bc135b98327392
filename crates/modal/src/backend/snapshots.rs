//! Snapshots: a Modal filesystem snapshot is an image id that a later
//! sandbox starts from (see `lifecycle`); checking and deleting one are
//! image calls.

use anyhow::anyhow;
use sandbox::{Handle, Result, Sandbox, SandboxError, SnapshotRef};
use tonic::Code;

use super::{ModalBackend, status_error};
use crate::wire;

/// How long a filesystem snapshot may take on Modal's side per call.
const SNAPSHOT_WAIT_SECS: f32 = 55.0;

pub(super) async fn snapshot(backend: &ModalBackend, handle: &Handle) -> Result<SnapshotRef> {
    let request = wire::SandboxSnapshotFsRequest {
        sandbox_id: handle.id.clone(),
        timeout: SNAPSHOT_WAIT_SECS,
    };
    let response = backend
        .client
        .retrying_creation("SandboxSnapshotFs", |mut rpc| {
            let request = request.clone();
            async move { rpc.sandbox_snapshot_fs(request).await }
        })
        .await
        .map_err(|s| status_error("snapshotting the sandbox", s))?;
    let result = response.result.unwrap_or_default();
    if result.status() != wire::generic_result::GenericStatus::Success
        || response.image_id.is_empty()
    {
        return Err(SandboxError::Transient(anyhow!(
            "the filesystem snapshot did not succeed ({:?}): {}",
            result.status(),
            result.exception
        )));
    }
    Ok(SnapshotRef {
        backend: backend.kind().to_owned(),
        id: response.image_id,
        size_bytes: 0,
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        base_image: handle.image.clone(),
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
