//! The gRPC service: request validation and Modal's semantics on top of
//! [`crate::state`].
//!
//! Each domain of the API has its own module; the trait implementation here
//! only dispatches, so additions to one domain stay in one file. V2 RPCs
//! that reuse V1 messages (`SandboxWaitV2`, `SandboxTerminateV2`, ...) are
//! served, and counted by [`crate::MockModal::calls`], under the V1 name.

mod apps;
mod container_exec;
mod images;
mod listing;
mod memory;
mod sandboxes;
mod sandboxes_v2;
mod secrets;
mod snapshots;

pub(crate) use memory::take as take_memory_snapshot;
pub(crate) use snapshots::snapshot_filesystem;

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
pub(crate) struct Auth {
    token_id: String,
    token_secret: String,
}

impl Auth {
    pub(crate) fn new(state: &State) -> Self {
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
pub(crate) struct Service {
    state: Arc<State>,
}

impl Service {
    pub(crate) fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

/// The variables of the stored Secrets `secret_ids`, then of the
/// `SecretSource`s (stored by id, or inline), later ones overriding
/// earlier ones; `NOT_FOUND` for an unknown Secret.
pub(crate) fn secret_env(
    state: &State,
    secret_ids: &[String],
    sources: &[wire::SecretSource],
) -> Result<Vec<(String, String)>, Status> {
    Ok(state
        .secrets
        .env_for(secret_ids, sources)?
        .into_iter()
        .collect())
}

/// The `x-idempotency-key` Modal's client sends with a call it may retry.
fn idempotency_key<T>(request: &Request<T>) -> Option<String> {
    request
        .metadata()
        .get("x-idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= 128)
        .map(|k| format!("idem:{k}"))
}

/// How long one long-poll call waits: what the client asks, capped; zero
/// (Modal's client polls with `timeout=0`) answers at once.
fn poll_limit(timeout: f32) -> Duration {
    if timeout > 0.0 {
        Duration::from_secs_f32(timeout.min(MAX_POLL))
    } else {
        Duration::ZERO
    }
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

    async fn secret_get_or_create(
        &self,
        request: Request<wire::SecretGetOrCreateRequest>,
    ) -> Result<Response<wire::SecretGetOrCreateResponse>, Status> {
        secrets::secret_get_or_create(&self.state, request).await
    }

    async fn secret_get_info(
        &self,
        request: Request<wire::SecretGetInfoRequest>,
    ) -> Result<Response<wire::SecretGetInfoResponse>, Status> {
        secrets::secret_get_info(&self.state, request).await
    }

    async fn secret_update(
        &self,
        request: Request<wire::SecretUpdateRequest>,
    ) -> Result<Response<()>, Status> {
        secrets::secret_update(&self.state, request).await
    }

    async fn secret_delete(
        &self,
        request: Request<wire::SecretDeleteRequest>,
    ) -> Result<Response<()>, Status> {
        secrets::secret_delete(&self.state, request).await
    }

    async fn secret_list(
        &self,
        request: Request<wire::SecretListRequest>,
    ) -> Result<Response<wire::SecretListResponse>, Status> {
        secrets::secret_list(&self.state, request).await
    }

    async fn auth_token_get(
        &self,
        request: Request<wire::AuthTokenGetRequest>,
    ) -> Result<Response<wire::AuthTokenGetResponse>, Status> {
        sandboxes_v2::auth_token_get(&self.state, request).await
    }

    async fn sandbox_create_v2(
        &self,
        request: Request<wire::SandboxCreateV2Request>,
    ) -> Result<Response<wire::SandboxCreateV2Response>, Status> {
        sandboxes_v2::sandbox_create_v2(&self.state, request).await
    }

    async fn sandbox_get_command_router_access(
        &self,
        request: Request<wire::SandboxGetCommandRouterAccessRequest>,
    ) -> Result<Response<wire::SandboxGetCommandRouterAccessResponse>, Status> {
        sandboxes_v2::sandbox_get_command_router_access(&self.state, request).await
    }

    async fn task_get_command_router_access(
        &self,
        request: Request<wire::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<wire::TaskGetCommandRouterAccessResponse>, Status> {
        sandboxes_v2::task_get_command_router_access(&self.state, request).await
    }

    async fn sandbox_get_from_name(
        &self,
        request: Request<wire::SandboxGetFromNameRequest>,
    ) -> Result<Response<wire::SandboxGetFromNameResponse>, Status> {
        // The mock has one kind of sandbox: V1 lookups find the same ones.
        sandboxes_v2::sandbox_get_from_name_v2(&self.state, request).await
    }

    async fn sandbox_get_from_name_v2(
        &self,
        request: Request<wire::SandboxGetFromNameRequest>,
    ) -> Result<Response<wire::SandboxGetFromNameResponse>, Status> {
        sandboxes_v2::sandbox_get_from_name_v2(&self.state, request).await
    }

    async fn sandbox_get_task_id_v2(
        &self,
        request: Request<wire::SandboxGetTaskIdRequest>,
    ) -> Result<Response<wire::SandboxGetTaskIdResponse>, Status> {
        sandboxes::sandbox_get_task_id(&self.state, request).await
    }

    async fn sandbox_tags_get_v2(
        &self,
        request: Request<wire::SandboxTagsGetRequest>,
    ) -> Result<Response<wire::SandboxTagsGetResponse>, Status> {
        sandboxes_v2::sandbox_tags_get_v2(&self.state, request).await
    }

    async fn sandbox_tags_set_v2(
        &self,
        request: Request<wire::SandboxTagsSetRequest>,
    ) -> Result<Response<()>, Status> {
        sandboxes::sandbox_tags_set(&self.state, request).await
    }

    async fn sandbox_terminate_v2(
        &self,
        request: Request<wire::SandboxTerminateRequest>,
    ) -> Result<Response<wire::SandboxTerminateResponse>, Status> {
        sandboxes::sandbox_terminate(&self.state, request).await
    }

    async fn sandbox_wait_v2(
        &self,
        request: Request<wire::SandboxWaitRequest>,
    ) -> Result<Response<wire::SandboxWaitResponse>, Status> {
        sandboxes::sandbox_wait(&self.state, request).await
    }

    async fn sandbox_list_v2(
        &self,
        request: Request<wire::SandboxListRequest>,
    ) -> Result<Response<wire::SandboxListResponse>, Status> {
        listing::sandbox_list(&self.state, request).await
    }

    async fn sandbox_restore_v2(
        &self,
        request: Request<wire::SandboxRestoreV2Request>,
    ) -> Result<Response<wire::SandboxRestoreV2Response>, Status> {
        memory::sandbox_restore_v2(&self.state, request).await
    }

    async fn sandbox_snapshot_get(
        &self,
        request: Request<wire::SandboxSnapshotGetRequest>,
    ) -> Result<Response<wire::SandboxSnapshotGetResponse>, Status> {
        memory::sandbox_snapshot_get(&self.state, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_timeout_polls_and_a_long_one_is_capped() {
        assert_eq!(poll_limit(0.0), Duration::ZERO);
        assert_eq!(poll_limit(-1.0), Duration::ZERO);
        assert_eq!(poll_limit(f32::NAN), Duration::ZERO);
        assert_eq!(poll_limit(2.5), Duration::from_millis(2500));
        assert_eq!(poll_limit(3600.0), Duration::from_secs(55));
    }
}
