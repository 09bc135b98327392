//! Filesystem snapshots: a copy of the sandbox directory kept as an image,
//! by the legacy `SandboxSnapshotFs` and by the command router's
//! `TaskSnapshotFilesystem` (which adds an expiry).

use std::sync::Arc;
use std::time::Duration;

use modal::wire;
use tonic::{Request, Response, Status};

use super::success;
use crate::ids::new_id;
use crate::state::{self, MockImage, State};

pub(super) async fn sandbox_snapshot_fs(
    state: &Arc<State>,
    request: Request<wire::SandboxSnapshotFsRequest>,
) -> Result<Response<wire::SandboxSnapshotFsResponse>, Status> {
    state.enter("SandboxSnapshotFs")?;
    let r = request.into_inner();
    let image_id = snapshot_filesystem(state, &r.sandbox_id, None).await?;
    Ok(Response::new(wire::SandboxSnapshotFsResponse {
        image_id,
        result: Some(success()),
    }))
}

/// Copies the running sandbox's directory into a new image kept for `ttl`
/// (`None`: until deleted) and returns the image's id.
pub(crate) async fn snapshot_filesystem(
    state: &State,
    sandbox_id: &str,
    ttl: Option<Duration>,
) -> Result<String, Status> {
    let view = state
        .sandbox_view(sandbox_id)
        .ok_or_else(|| Status::not_found(format!("sandbox {sandbox_id} not found")))?;
    if !view.running {
        return Err(Status::failed_precondition("the sandbox has finished"));
    }
    let image_id = new_id("im");
    let files = state.image_dir(&image_id);
    let (from, to) = (view.dir.clone(), files.clone());
    tokio::task::spawn_blocking(move || state::copy_tree(&from, &to))
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| Status::internal(format!("snapshot: {e}")))?;
    let created = state.now();
    state.inner.lock().unwrap().images.insert(
        image_id.clone(),
        MockImage {
            view: state::ImageView {
                id: image_id.clone(),
                dockerfile_commands: Vec::new(),
                base_images: vec![view.definition.image_id.clone()],
                builder_version: String::new(),
                snapshot_of: Some(view.id.clone()),
            },
            created,
            ttl,
            files: Some(files),
        },
    );
    Ok(image_id)
}
