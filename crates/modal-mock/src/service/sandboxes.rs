//! Sandbox lifecycle: create, task id, tags, terminate and wait.

use std::sync::Arc;
use std::time::Duration;

use modal::wire::{self, generic_result::GenericStatus};
use tonic::{Request, Response, Status};

use super::{poll_limit, success};
use crate::exec::Exec;
use crate::ids::{new_id, unix_now};
use crate::state::{self, MockSandbox, State};

pub(super) async fn sandbox_create(
    state: &Arc<State>,
    request: Request<wire::SandboxCreateRequest>,
) -> Result<Response<wire::SandboxCreateResponse>, Status> {
    state.enter("SandboxCreate")?;
    let r = request.into_inner();
    let definition = r
        .definition
        .ok_or_else(|| Status::invalid_argument("definition is required"))?;
    let env = super::secret_env(state, &definition.secret_ids, &[])?;
    let (sandbox_id, _) = create(state, &r.app_id, definition, &r.tags, env)?;
    Ok(Response::new(wire::SandboxCreateResponse { sandbox_id }))
}

/// Starts a sandbox (V1 and V2 alike) and returns its id and task id.
pub(super) fn create(
    state: &Arc<State>,
    app_id: &str,
    definition: wire::Sandbox,
    tags: &[wire::SandboxTag],
    env: Vec<(String, String)>,
) -> Result<(String, String), Status> {
    let id = new_id("sb");
    let dir = state.sandbox_dir(&id);
    let snapshot_files = {
        let inner = state.inner.lock().unwrap();
        if !inner.apps.values().any(|a| a == app_id) {
            return Err(Status::not_found(format!("app {app_id} not found")));
        }
        let image = inner
            .images
            .get(&definition.image_id)
            .filter(|i| state.image_alive(i))
            .ok_or_else(|| Status::not_found(format!("image {} not found", definition.image_id)))?;
        if let Some(name) = &definition.name {
            ensure_name_free(&inner, app_id, name)?;
        }
        image.files.clone()
    };
    let prepared = match &snapshot_files {
        Some(files) => state::copy_tree(files, &dir),
        None => std::fs::create_dir_all(&dir),
    };
    prepared.map_err(|e| Status::internal(format!("preparing the sandbox: {e}")))?;
    let entry = Exec::start(&id, &definition.entrypoint_args, &dir, &env, true);
    let timeout = Duration::from_secs(u64::from(definition.timeout_secs.max(1)));
    let task_id = new_id("ta");
    let mut sandbox = MockSandbox {
        view: state::SandboxView {
            id: id.clone(),
            app_id: app_id.to_owned(),
            name: definition.name.clone(),
            tags: tags
                .iter()
                .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
                .collect(),
            definition,
            dir,
            running: true,
            restored_from: None,
            network_changes: 0,
        },
        created_at: unix_now(),
        task_id: task_id.clone(),
        result: None,
        pids: entry.pid.into_iter().collect(),
        entry: Some(entry.clone()),
        env,
    };
    if entry.pid.is_none() {
        sandbox.result = Some(wire::GenericResult {
            status: GenericStatus::InitFailure as i32,
            exception: "the entry point did not start".into(),
            exitcode: 127,
        });
        sandbox.view.running = false;
    }
    state.inner.lock().unwrap().sandboxes.push(sandbox);
    end_with_entry_point(state, &id, entry, timeout);
    Ok((id, task_id))
}

/// Named sandboxes are unique among an app's running ones.
pub(super) fn ensure_name_free(
    inner: &state::Inner,
    app_id: &str,
    name: &str,
) -> Result<(), Status> {
    if inner.sandboxes.iter().any(|s| {
        s.result.is_none() && s.view.app_id == app_id && s.view.name.as_deref() == Some(name)
    }) {
        return Err(Status::already_exists(format!(
            "a sandbox named {name} is running"
        )));
    }
    Ok(())
}

/// The sandbox ends with its entry point, or at its timeout.
pub(super) fn end_with_entry_point(
    state: &Arc<State>,
    sandbox_id: &str,
    entry: Arc<Exec>,
    timeout: Duration,
) {
    let state = state.clone();
    let sandbox_id = sandbox_id.to_owned();
    tokio::spawn(async move {
        let mut changed = entry.subscribe();
        let ended = tokio::time::timeout(timeout, async {
            while entry.exit_code().is_none() {
                if changed.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
        let result = match (ended, entry.exit_code()) {
            (Err(_), _) => wire::GenericResult {
                status: GenericStatus::Timeout as i32,
                exception: "sandbox timed out".into(),
                exitcode: 0,
            },
            (Ok(()), Some(0)) => success(),
            (Ok(()), code) => wire::GenericResult {
                status: GenericStatus::Failure as i32,
                exception: String::new(),
                exitcode: code.unwrap_or(255),
            },
        };
        state.finish(&sandbox_id, result);
    });
}

pub(super) async fn sandbox_get_task_id(
    state: &Arc<State>,
    request: Request<wire::SandboxGetTaskIdRequest>,
) -> Result<Response<wire::SandboxGetTaskIdResponse>, Status> {
    state.enter("SandboxGetTaskId")?;
    let r = request.into_inner();
    let inner = state.inner.lock().unwrap();
    let sandbox = inner
        .sandboxes
        .iter()
        .find(|s| s.view.id == r.sandbox_id)
        .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
    Ok(Response::new(match &sandbox.result {
        Some(result) => wire::SandboxGetTaskIdResponse {
            task_id: None,
            task_result: Some(result.clone()),
        },
        None => wire::SandboxGetTaskIdResponse {
            task_id: Some(sandbox.task_id.clone()),
            task_result: None,
        },
    }))
}

pub(super) async fn sandbox_tags_set(
    state: &Arc<State>,
    request: Request<wire::SandboxTagsSetRequest>,
) -> Result<Response<()>, Status> {
    state.enter("SandboxTagsSet")?;
    let r = request.into_inner();
    let mut inner = state.inner.lock().unwrap();
    let sandbox = inner
        .sandboxes
        .iter_mut()
        .find(|s| s.view.id == r.sandbox_id)
        .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
    sandbox.view.tags = r
        .tags
        .into_iter()
        .map(|t| (t.tag_name, t.tag_value))
        .collect();
    Ok(Response::new(()))
}

pub(super) async fn sandbox_terminate(
    state: &Arc<State>,
    request: Request<wire::SandboxTerminateRequest>,
) -> Result<Response<wire::SandboxTerminateResponse>, Status> {
    state.enter("SandboxTerminate")?;
    let r = request.into_inner();
    if state.sandbox_view(&r.sandbox_id).is_none() {
        return Err(Status::not_found(format!(
            "sandbox {} not found",
            r.sandbox_id
        )));
    }
    let existing_result = state.finish(&r.sandbox_id, state::terminated());
    Ok(Response::new(wire::SandboxTerminateResponse {
        existing_result,
    }))
}

pub(super) async fn sandbox_wait(
    state: &Arc<State>,
    request: Request<wire::SandboxWaitRequest>,
) -> Result<Response<wire::SandboxWaitResponse>, Status> {
    state.enter("SandboxWait")?;
    let r = request.into_inner();
    let deadline = tokio::time::Instant::now() + poll_limit(r.timeout);
    loop {
        let result = {
            let inner = state.inner.lock().unwrap();
            let sandbox = inner
                .sandboxes
                .iter()
                .find(|s| s.view.id == r.sandbox_id)
                .ok_or_else(|| Status::not_found(format!("sandbox {} not found", r.sandbox_id)))?;
            sandbox.result.clone()
        };
        if result.is_some() || tokio::time::Instant::now() >= deadline {
            return Ok(Response::new(wire::SandboxWaitResponse {
                result,
                metadata: None,
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
