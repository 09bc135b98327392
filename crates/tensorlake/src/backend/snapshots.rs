//! Filesystem snapshots of a running sandbox, waited for until Tensorlake
//! reports them completed or failed; a later create restores from one by
//! its id (see `lifecycle`).

use anyhow::anyhow;
use sandbox::{Handle, Result, SandboxError, SnapshotRef};

use super::{KIND, Poll, TRANSITION_GUARD, TensorlakeBackend, check_id, map_err, plain};
use crate::client::found;
use crate::models::{CreateSnapshot, SnapshotType};

pub(super) async fn snapshot(backend: &TensorlakeBackend, handle: &Handle) -> Result<SnapshotRef> {
    backend.running(handle).await?;
    let created = backend
        .client
        .snapshot_sandbox(
            &handle.id,
            &CreateSnapshot {
                snapshot_type: Some(SnapshotType::Filesystem),
            },
        )
        .await
        .map_err(map_err)?;
    check_id(&created.snapshot_id)?;
    let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
    let mut poll = Poll::new();
    loop {
        let info = backend
            .client
            .get_snapshot(&created.snapshot_id)
            .await
            .map_err(map_err)?;
        match info.status {
            // Usable from `local_ready`, as the SDK's default wait.
            ref status if status.is_usable() => {
                return Ok(SnapshotRef {
                    backend: KIND.to_owned(),
                    id: created.snapshot_id,
                    size_bytes: info.size_bytes.unwrap_or(0).max(0) as u64,
                    created_at_ms: chrono_ms(),
                    base_image: info.base_image.or(handle.image.clone()),
                    sha256: None,
                    lineage: sandbox::Lineage::from_labels(&handle.labels),
                });
            }
            ref status if status.is_dead() => {
                return Err(SandboxError::Fatal(anyhow!(
                    "snapshot {} is {status}: {}",
                    created.snapshot_id,
                    info.error.unwrap_or_default()
                )));
            }
            _ if tokio::time::Instant::now() > deadline => {
                return Err(SandboxError::Transient(anyhow!(
                    "snapshot {} still {}",
                    created.snapshot_id,
                    info.status
                )));
            }
            _ => poll.wait().await,
        }
    }
}

pub(super) async fn snapshot_exists(
    backend: &TensorlakeBackend,
    snapshot: &SnapshotRef,
) -> Result<bool> {
    if snapshot.backend != KIND || !plain(&snapshot.id) {
        return Ok(false);
    }
    Ok(
        match found(backend.client.get_snapshot(&snapshot.id).await).map_err(map_err)? {
            Some(info) => !info.status.is_dead(),
            None => false,
        },
    )
}

pub(super) async fn delete_snapshot(
    backend: &TensorlakeBackend,
    snapshot: &SnapshotRef,
) -> Result<()> {
    check_id(&snapshot.id)?;
    found(backend.client.delete_snapshot(&snapshot.id).await).map_err(map_err)?;
    Ok(())
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
