//! Sandboxes V2, what Modal's client uses by default: create answers with
//! the task and the command router's address and token; lookups by name;
//! tags read back. The V2 RPCs that reuse V1 messages (wait, terminate, task
//! id, tags set, list) are served by the V1 functions.

use std::sync::Arc;

use modal::wire;
use tonic::{Request, Response, Status};

use super::sandboxes::create;
use crate::state::State;

pub(super) async fn auth_token_get(
    state: &Arc<State>,
    _request: Request<wire::AuthTokenGetRequest>,
) -> Result<Response<wire::AuthTokenGetResponse>, Status> {
    state.enter("AuthTokenGet")?;
    // Sent back as `x-modal-auth-token`; the token id and secret stay the
    // credential the mock checks.
    Ok(Response::new(wire::AuthTokenGetResponse {
        token: state.router_token("auth"),
    }))
}

fn router_access(state: &State, task_id: &str) -> wire::CommandRouterAccess {
    wire::CommandRouterAccess {
        jwt: state.router_token(task_id),
        url: state.router_url(),
    }
}

pub(super) async fn sandbox_create_v2(
    state: &Arc<State>,
    request: Request<wire::SandboxCreateV2Request>,
) -> Result<Response<wire::SandboxCreateV2Response>, Status> {
    state.note_retry_attempt(
        "SandboxCreateV2",
        request
            .metadata()
            .get("x-retry-attempt")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok()),
    );
    state.enter("SandboxCreateV2")?;
    let key = super::idempotency_key(&request);
    let r = request.into_inner();
    let definition = r
        .definition
        .ok_or_else(|| Status::invalid_argument("definition is required"))?;
    // A retried create (same x-idempotency-key) answers with the sandbox the
    // first attempt made, even if that answer was lost.
    let (sandbox_id, task_id) = match key.as_ref().and_then(|k| state.made(k)) {
        Some(sandbox_id) => {
            let task_id = task_of(state, &sandbox_id)?;
            (sandbox_id, task_id)
        }
        None => {
            let env = super::secret_env(state, &definition.secret_ids, &r.secret_sources)?;
            let made = create(state, &r.app_id, definition, &r.tags, env)?;
            if let Some(key) = key {
                state.record_made(key, made.0.clone());
            }
            made
        }
    };
    state.lose_answer("SandboxCreateV2")?;
    Ok(Response::new(wire::SandboxCreateV2Response {
        command_router_access: Some(router_access(state, &task_id)),
        metadata: Some(wire::SandboxHandleMetadata {
            result: None,
            app_id: r.app_id,
        }),
        sandbox_id,
        task_id,
        sandbox_token: String::new(),
    }))
}

fn task_of(state: &State, sandbox_id: &str) -> Result<String, Status> {
    state
        .inner
        .lock()
        .unwrap()
        .sandboxes
        .iter()
        .find(|s| s.view.id == sandbox_id)
        .map(|s| s.task_id.clone())
        .ok_or_else(|| Status::not_found(format!("sandbox {sandbox_id} not found")))
}

/// The task of a running sandbox, by sandbox id or task id.
fn running_task(state: &State, sandbox_id: &str, task_id: &str) -> Result<String, Status> {
    let inner = state.inner.lock().unwrap();
    let sandbox = inner
        .sandboxes
        .iter()
        .find(|s| {
            (!sandbox_id.is_empty() && s.view.id == sandbox_id)
                || (!task_id.is_empty() && s.task_id == task_id)
        })
        .ok_or_else(|| Status::not_found("sandbox not found"))?;
    if sandbox.result.is_some() {
        return Err(Status::not_found(format!(
            "sandbox {} has finished",
            sandbox.view.id
        )));
    }
    Ok(sandbox.task_id.clone())
}

pub(super) async fn sandbox_get_command_router_access(
    state: &Arc<State>,
    request: Request<wire::SandboxGetCommandRouterAccessRequest>,
) -> Result<Response<wire::SandboxGetCommandRouterAccessResponse>, Status> {
    use wire::sandbox_get_command_router_access_request::Target;
    state.enter("SandboxGetCommandRouterAccess")?;
    let task_id = match request.into_inner().target {
        Some(Target::SandboxId(id)) => running_task(state, &id, "")?,
        Some(Target::TaskId(id)) => running_task(state, "", &id)?,
        None => {
            return Err(Status::invalid_argument(
                "sandbox_id or task_id is required",
            ));
        }
    };
    let access = router_access(state, &task_id);
    Ok(Response::new(wire::SandboxGetCommandRouterAccessResponse {
        jwt: access.jwt,
        url: access.url,
    }))
}

pub(super) async fn task_get_command_router_access(
    state: &Arc<State>,
    request: Request<wire::TaskGetCommandRouterAccessRequest>,
) -> Result<Response<wire::TaskGetCommandRouterAccessResponse>, Status> {
    state.enter("TaskGetCommandRouterAccess")?;
    let task_id = running_task(state, "", &request.into_inner().task_id)?;
    let access = router_access(state, &task_id);
    Ok(Response::new(wire::TaskGetCommandRouterAccessResponse {
        jwt: access.jwt,
        url: access.url,
    }))
}

pub(super) async fn sandbox_get_from_name_v2(
    state: &Arc<State>,
    request: Request<wire::SandboxGetFromNameRequest>,
) -> Result<Response<wire::SandboxGetFromNameResponse>, Status> {
    state.enter("SandboxGetFromNameV2")?;
    let r = request.into_inner();
    let inner = state.inner.lock().unwrap();
    let app_id = inner
        .apps
        .get(&r.app_name)
        .ok_or_else(|| Status::not_found(format!("app {} not found", r.app_name)))?;
    let sandbox = inner
        .sandboxes
        .iter()
        .rev()
        .filter(|s| r.include_terminated || s.result.is_none())
        .find(|s| s.view.app_id == *app_id && s.view.name.as_deref() == Some(&r.sandbox_name))
        .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_name)))?;
    Ok(Response::new(wire::SandboxGetFromNameResponse {
        sandbox_id: sandbox.view.id.clone(),
        metadata: Some(wire::SandboxHandleMetadata {
            result: sandbox.result.clone(),
            app_id: app_id.clone(),
        }),
    }))
}

pub(super) async fn sandbox_tags_get_v2(
    state: &Arc<State>,
    request: Request<wire::SandboxTagsGetRequest>,
) -> Result<Response<wire::SandboxTagsGetResponse>, Status> {
    state.enter("SandboxTagsGetV2")?;
    let r = request.into_inner();
    let view = state
        .sandbox_view(&r.sandbox_id)
        .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
    Ok(Response::new(wire::SandboxTagsGetResponse {
        tags: view
            .tags
            .into_iter()
            .map(|(tag_name, tag_value)| wire::SandboxTag {
                tag_name,
                tag_value,
            })
            .collect(),
    }))
}
