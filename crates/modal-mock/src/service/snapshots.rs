//! Filesystem snapshots: a copy of the sandbox directory kept as an image.

use std::sync::Arc;

use modal::wire;
use tonic::{Request, Response, Status};

use super::success;
use crate::state::{self, MockImage, State, new_id};

pub async fn sandbox_snapshot_fs(
    state: &Arc<State>,
    request: Request<wire::SandboxSnapshotFsRequest>,
) -> Result<Response<wire::SandboxSnapshotFsResponse>, Status> {
    state.enter("SandboxSnapshotFs")?;
    let r = request.into_inner();
    let view = state
        .sandbox_view(&r.sandbox_id)
        .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
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
            files: Some(files),
        },
    );
    Ok(Response::new(wire::SandboxSnapshotFsResponse {
        image_id,
        result: Some(success()),
    }))
}
