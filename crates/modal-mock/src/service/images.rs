//! Images: build by recipe, stream the build, look up by id, delete.

use std::sync::Arc;

use modal::wire;
use tonic::{Request, Response, Status};

use super::{Stream_, success};
use crate::ids::new_id;
use crate::state::{self, MockImage, State};

/// A stable id for an image definition, so the same recipe gets the same
/// image (Modal's `ImageGetOrCreate` is keyed by the recipe).
fn recipe_digest(parts: &[String]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    format!("{:016x}", h.finish())
}

pub(super) async fn image_get_or_create(
    state: &Arc<State>,
    request: Request<wire::ImageGetOrCreateRequest>,
) -> Result<Response<wire::ImageGetOrCreateResponse>, Status> {
    state.enter("ImageGetOrCreate")?;
    let r = request.into_inner();
    let image = r
        .image
        .ok_or_else(|| Status::invalid_argument("image is required"))?;
    let first = image
        .dockerfile_commands
        .first()
        .map(|c| c.trim().to_ascii_uppercase());
    if !first.is_some_and(|c| c.starts_with("FROM ")) {
        return Err(Status::invalid_argument(
            "the first Dockerfile command must be FROM",
        ));
    }
    let mut inner = state.inner.lock().unwrap();
    if !inner.apps.values().any(|a| *a == r.app_id) {
        return Err(Status::not_found(format!("app {} not found", r.app_id)));
    }
    let bases: Vec<String> = image
        .base_images
        .iter()
        .map(|b| b.image_id.clone())
        .collect();
    for base in &bases {
        if !inner.images.contains_key(base) {
            return Err(Status::not_found(format!("base image {base} not found")));
        }
    }
    let mut key = image.dockerfile_commands.clone();
    key.extend(bases.iter().cloned());
    key.push(r.builder_version.clone());
    let mut image_id = format!("im-{}", recipe_digest(&key));
    if r.force_build {
        image_id = new_id("im");
    }
    inner
        .images
        .entry(image_id.clone())
        .or_insert_with(|| MockImage {
            view: state::ImageView {
                id: image_id.clone(),
                dockerfile_commands: image.dockerfile_commands,
                base_images: bases,
                builder_version: r.builder_version,
                snapshot_of: None,
            },
            created: state.now(),
            ttl: None,
            files: None,
        });
    // The result is left for ImageJoinStreaming, as for a fresh build.
    Ok(Response::new(wire::ImageGetOrCreateResponse {
        image_id,
        result: None,
    }))
}

pub(super) async fn image_join_streaming(
    state: &Arc<State>,
    request: Request<wire::ImageJoinStreamingRequest>,
) -> Result<Response<Stream_<wire::ImageJoinStreamingResponse>>, Status> {
    state.enter("ImageJoinStreaming")?;
    let r = request.into_inner();
    let view = state
        .image_view(&r.image_id)
        .ok_or_else(|| Status::not_found(format!("image {} not found", r.image_id)))?;
    let mut items: Vec<Result<wire::ImageJoinStreamingResponse, Status>> = view
        .dockerfile_commands
        .iter()
        .enumerate()
        .map(|(i, command)| {
            Ok(wire::ImageJoinStreamingResponse {
                result: None,
                task_logs: vec![wire::TaskLogs {
                    data: format!("Step {}: {command}\n", i + 1),
                    file_descriptor: wire::FileDescriptor::Stdout as i32,
                }],
                entry_id: format!("{}-0", i + 1),
                eof: false,
            })
        })
        .collect();
    let skip = r
        .last_entry_id
        .split('-')
        .next()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    items.drain(..skip.min(items.len()));
    items.push(Ok(wire::ImageJoinStreamingResponse {
        result: Some(success()),
        task_logs: Vec::new(),
        entry_id: String::new(),
        eof: true,
    }));
    Ok(Response::new(Box::pin(tokio_stream::iter(items))))
}

pub(super) async fn image_from_id(
    state: &Arc<State>,
    request: Request<wire::ImageFromIdRequest>,
) -> Result<Response<wire::ImageFromIdResponse>, Status> {
    state.enter("ImageFromId")?;
    let r = request.into_inner();
    let inner = state.inner.lock().unwrap();
    match inner.images.get(&r.image_id) {
        Some(image) if state.image_alive(image) => Ok(Response::new(wire::ImageFromIdResponse {
            image_id: r.image_id,
        })),
        _ => Err(Status::not_found(format!("image {} not found", r.image_id))),
    }
}

pub(super) async fn image_delete(
    state: &Arc<State>,
    request: Request<wire::ImageDeleteRequest>,
) -> Result<Response<()>, Status> {
    state.enter("ImageDelete")?;
    let r = request.into_inner();
    let removed = {
        let mut inner = state.inner.lock().unwrap();
        match inner.images.get(&r.image_id) {
            Some(image) if state.image_alive(image) => inner.images.remove(&r.image_id),
            _ => None,
        }
    };
    let image =
        removed.ok_or_else(|| Status::not_found(format!("image {} not found", r.image_id)))?;
    if let Some(files) = image.files {
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(files)).await;
    }
    Ok(Response::new(()))
}
