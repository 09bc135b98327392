//! Secrets: `SecretGetOrCreate`, `SecretGetInfo`, `SecretUpdate`,
//! `SecretDelete` and `SecretList` over [`crate::secrets::Secrets`]. Values
//! are never logged.

use std::sync::Arc;

use modal::wire;
use tonic::{Request, Response, Status};

use crate::state::State;

pub(super) async fn secret_get_or_create(
    state: &Arc<State>,
    request: Request<wire::SecretGetOrCreateRequest>,
) -> Result<Response<wire::SecretGetOrCreateResponse>, Status> {
    state.enter("SecretGetOrCreate")?;
    state
        .secrets
        .get_or_create(request.into_inner())
        .map(Response::new)
}

pub(super) async fn secret_get_info(
    state: &Arc<State>,
    request: Request<wire::SecretGetInfoRequest>,
) -> Result<Response<wire::SecretGetInfoResponse>, Status> {
    state.enter("SecretGetInfo")?;
    state
        .secrets
        .get_info(request.into_inner())
        .map(Response::new)
}

pub(super) async fn secret_update(
    state: &Arc<State>,
    request: Request<wire::SecretUpdateRequest>,
) -> Result<Response<()>, Status> {
    state.enter("SecretUpdate")?;
    state
        .secrets
        .update(request.into_inner())
        .map(Response::new)
}

pub(super) async fn secret_delete(
    state: &Arc<State>,
    request: Request<wire::SecretDeleteRequest>,
) -> Result<Response<()>, Status> {
    state.enter("SecretDelete")?;
    state
        .secrets
        .delete(request.into_inner())
        .map(Response::new)
}

pub(super) async fn secret_list(
    state: &Arc<State>,
    request: Request<wire::SecretListRequest>,
) -> Result<Response<wire::SecretListResponse>, Status> {
    state.enter("SecretList")?;
    Ok(Response::new(state.secrets.list(request.into_inner())))
}
