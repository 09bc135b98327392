//! The gRPC service: request validation and Modal's semantics on top of
//! [`crate::state`].
//!
//! Each domain of the API has its own module; the trait implementation here
//! only dispatches, so additions to one domain stay in one file.

mod apps;
mod container_exec;
mod images;
mod listing;
mod sandboxes;
mod snapshots;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use modal::wire::{self, generic_result::GenericStatus, modal_client_server::ModalClient};
use tonic::{Request, Response, Status};

use crate::state::State;

type Stream_<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Most seconds one long-poll call waits, whatever the client asks.
const MAX_POLL: f32 = 55.0;

/// Checks Modal's credentials and client version on every call.
#[derive(Clone)]
pub struct Auth {
    token_id: String,
    token_secret: String,
}

impl Auth {
    pub fn new(state: &State) -> Self {
        Self {
            token_id: state.config.token_id.clone(),
            token_secret: state.config.token_secret.clone(),
        }
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let header = |name: &str| {
            request
                .metadata()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let id = header(wire::HEADER_TOKEN_ID);
        let secret = header(wire::HEADER_TOKEN_SECRET);
        if id.as_deref() != Some(self.token_id.as_str())
            || secret.as_deref() != Some(self.token_secret.as_str())
        {
            return Err(Status::unauthenticated(
                "Token missing or invalid. Run `modal token new`.",
            ));
        }
        if header(wire::HEADER_CLIENT_VERSION).is_none_or(|v| v.is_empty()) {
            return Err(Status::failed_precondition(
                "x-modal-client-version is required",
            ));
        }
        Ok(request)
    }
}

/// Modal's `ModalClient` service over the mock's state.
pub struct Service {
    state: Arc<State>,
}

impl Service {
    pub fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

fn poll_limit(timeout: f32) -> Duration {
    let secs = if timeout > 0.0 {
        timeout.min(MAX_POLL)
    } else {
        MAX_POLL
    };
    Duration::from_secs_f32(secs)
}

fn success() -> wire::GenericResult {
    wire::GenericResult {
        status: GenericStatus::Success as i32,
        exception: String::new(),
        exitcode: 0,
    }
}

#[tonic::async_trait]
impl ModalClient for Service {
    async fn app_get_or_create(
        &self,
        request: Request<wire::AppGetOrCreateRequest>,
    ) -> Result<Response<wire::AppGetOrCreateResponse>, Status> {
        apps::app_get_or_create(&self.state, request).await
    }

    async fn sandbox_create(
        &self,
        request: Request<wire::SandboxCreateRequest>,
    ) -> Result<Response<wire::SandboxCreateResponse>, Status> {
        sandboxes::sandbox_create(&self.state, request).await
    }

    async fn sandbox_get_task_id(
        &self,
        request: Request<wire::SandboxGetTaskIdRequest>,
    ) -> Result<Response<wire::SandboxGetTaskIdResponse>, Status> {
        sandboxes::sandbox_get_task_id(&self.state, request).await
    }

    async fn sandbox_tags_set(
        &self,
        request: Request<wire::SandboxTagsSetRequest>,
    ) -> Result<Response<()>, Status> {
        sandboxes::sandbox_tags_set(&self.state, request).await
    }

    async fn sandbox_terminate(
        &self,
        request: Request<wire::SandboxTerminateRequest>,
    ) -> Result<Response<wire::SandboxTerminateResponse>, Status> {
        sandboxes::sandbox_terminate(&self.state, request).await
    }

    async fn sandbox_wait(
        &self,
        request: Request<wire::SandboxWaitRequest>,
    ) -> Result<Response<wire::SandboxWaitResponse>, Status> {
        sandboxes::sandbox_wait(&self.state, request).await
    }

    async fn sandbox_list(
        &self,
        request: Request<wire::SandboxListRequest>,
    ) -> Result<Response<wire::SandboxListResponse>, Status> {
        listing::sandbox_list(&self.state, request).await
    }

    async fn sandbox_snapshot_fs(
        &self,
        request: Request<wire::SandboxSnapshotFsRequest>,
    ) -> Result<Response<wire::SandboxSnapshotFsResponse>, Status> {
        snapshots::sandbox_snapshot_fs(&self.state, request).await
    }

    async fn container_exec(
        &self,
        request: Request<wire::ContainerExecRequest>,
    ) -> Result<Response<wire::ContainerExecResponse>, Status> {
        container_exec::container_exec(&self.state, request).await
    }

    type ContainerExecGetOutputStream = Stream_<wire::RuntimeOutputBatch>;

    async fn container_exec_get_output(
        &self,
        request: Request<wire::ContainerExecGetOutputRequest>,
    ) -> Result<Response<Self::ContainerExecGetOutputStream>, Status> {
        container_exec::container_exec_get_output(&self.state, request).await
    }

    async fn container_exec_put_input(
        &self,
        request: Request<wire::ContainerExecPutInputRequest>,
    ) -> Result<Response<()>, Status> {
        container_exec::container_exec_put_input(&self.state, request).await
    }

    async fn container_exec_wait(
        &self,
        request: Request<wire::ContainerExecWaitRequest>,
    ) -> Result<Response<wire::ContainerExecWaitResponse>, Status> {
        container_exec::container_exec_wait(&self.state, request).await
    }

    async fn image_get_or_create(
        &self,
        request: Request<wire::ImageGetOrCreateRequest>,
    ) -> Result<Response<wire::ImageGetOrCreateResponse>, Status> {
        images::image_get_or_create(&self.state, request).await
    }

    type ImageJoinStreamingStream = Stream_<wire::ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        request: Request<wire::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        images::image_join_streaming(&self.state, request).await
    }

    async fn image_from_id(
        &self,
        request: Request<wire::ImageFromIdRequest>,
    ) -> Result<Response<wire::ImageFromIdResponse>, Status> {
        images::image_from_id(&self.state, request).await
    }

    async fn image_delete(
        &self,
        request: Request<wire::ImageDeleteRequest>,
    ) -> Result<Response<()>, Status> {
        images::image_delete(&self.state, request).await
    }
}
