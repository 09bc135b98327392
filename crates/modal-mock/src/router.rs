//! The task command router (`modal.task_command_router.TaskCommandRouter`):
//! where Modal's client runs processes, takes snapshots and changes the
//! network of a running sandbox. Modal serves it per worker over TLS; the
//! mock serves it beside the API at the same loopback address, in plaintext
//! (Modal's client accepts an `http` router URL only when its server is on
//! localhost). Every call carries `authorization: Bearer <jwt>` with a token
//! the mock handed out (`SandboxCreateV2`, `SandboxGetCommandRouterAccess`).

mod exec;

use std::sync::Arc;
use std::time::Duration;

use modal::wire::router::{self, task_command_router_server::TaskCommandRouter};
use tonic::{Request, Response, Status};

use crate::state::State;

/// Accepts only the router tokens this mock handed out.
#[derive(Clone)]
pub(crate) struct RouterAuth {
    state: Arc<State>,
}

impl RouterAuth {
    pub(crate) fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

impl tonic::service::Interceptor for RouterAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match token {
            Some(token) if self.state.router_token_valid(token) => Ok(request),
            _ => Err(Status::unauthenticated(
                "invalid or missing command router token",
            )),
        }
    }
}

/// The router service over the mock's state.
pub(crate) struct Router {
    state: Arc<State>,
}

impl Router {
    pub(crate) fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

/// What the router needs of the running sandbox of a task.
struct RunningTask {
    sandbox_id: String,
    dir: std::path::PathBuf,
    /// The sandbox's variables, which its execs inherit.
    env: Vec<(String, String)>,
}

/// The running sandbox of `task_id`.
fn running_task(state: &State, task_id: &str) -> Result<RunningTask, Status> {
    let inner = state.inner.lock().unwrap();
    let sandbox = inner
        .sandboxes
        .iter()
        .find(|s| s.task_id == task_id)
        .ok_or_else(|| Status::not_found(format!("task {task_id} not found")))?;
    if sandbox.result.is_some() {
        return Err(Status::not_found(format!("task {task_id} has finished")));
    }
    Ok(RunningTask {
        sandbox_id: sandbox.view.id.clone(),
        dir: sandbox.view.dir.clone(),
        env: sandbox.env.clone(),
    })
}

#[tonic::async_trait]
impl TaskCommandRouter for Router {
    async fn task_exec_start(
        &self,
        request: Request<router::TaskExecStartRequest>,
    ) -> Result<Response<router::TaskExecStartResponse>, Status> {
        exec::start(&self.state, request).await
    }

    type TaskExecStdioReadStream = exec::StdioStream;

    async fn task_exec_stdio_read(
        &self,
        request: Request<router::TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        exec::stdio_read(&self.state, request).await
    }

    async fn task_exec_stdin_write(
        &self,
        request: Request<router::TaskExecStdinWriteRequest>,
    ) -> Result<Response<router::TaskExecStdinWriteResponse>, Status> {
        exec::stdin_write(&self.state, request).await
    }

    async fn task_exec_wait(
        &self,
        request: Request<router::TaskExecWaitRequest>,
    ) -> Result<Response<router::TaskExecWaitResponse>, Status> {
        exec::wait(&self.state, request).await
    }

    async fn task_exec_poll(
        &self,
        request: Request<router::TaskExecPollRequest>,
    ) -> Result<Response<router::TaskExecPollResponse>, Status> {
        exec::poll(&self.state, request).await
    }

    async fn task_set_network_access(
        &self,
        request: Request<router::TaskSetNetworkAccessRequest>,
    ) -> Result<Response<router::TaskSetNetworkAccessResponse>, Status> {
        self.state.enter("TaskSetNetworkAccess")?;
        let r = request.into_inner();
        let access = r
            .network_access
            .ok_or_else(|| Status::invalid_argument("network_access is required"))?;
        let sandbox_id = running_task(&self.state, &r.task_id)?.sandbox_id;
        // Recorded, not enforced (the mock has no network of its own).
        let mut inner = self.state.inner.lock().unwrap();
        if let Some(sandbox) = inner.sandboxes.iter_mut().find(|s| s.view.id == sandbox_id) {
            sandbox.view.definition.block_network = false;
            sandbox.view.definition.network_access = Some(access);
            sandbox.view.network_changes += 1;
        }
        Ok(Response::new(router::TaskSetNetworkAccessResponse {}))
    }

    async fn task_snapshot_filesystem(
        &self,
        request: Request<router::TaskSnapshotFilesystemRequest>,
    ) -> Result<Response<router::TaskSnapshotFilesystemResponse>, Status> {
        self.state.enter("TaskSnapshotFilesystem")?;
        let r = request.into_inner();
        let key = format!("fs:{}", r.snapshot_id);
        if !r.snapshot_id.is_empty()
            && let Some(image_id) = self.state.made(&key)
        {
            return Ok(Response::new(router::TaskSnapshotFilesystemResponse {
                image_id,
            }));
        }
        let ttl = match r.ttl_seconds {
            Some(secs) if secs <= 0 => {
                return Err(Status::invalid_argument("ttl_seconds must be positive"));
            }
            Some(secs) => Some(Duration::from_secs(secs.unsigned_abs())),
            None => None,
        };
        let sandbox_id = running_task(&self.state, &r.task_id)?.sandbox_id;
        let image_id = crate::service::snapshot_filesystem(&self.state, &sandbox_id, ttl).await?;
        if !r.snapshot_id.is_empty() {
            self.state.record_made(key, image_id.clone());
        }
        Ok(Response::new(router::TaskSnapshotFilesystemResponse {
            image_id,
        }))
    }

    async fn task_snapshot_memory(
        &self,
        request: Request<router::TaskSnapshotMemoryRequest>,
    ) -> Result<Response<router::TaskSnapshotMemoryResponse>, Status> {
        self.state.enter("TaskSnapshotMemory")?;
        let r = request.into_inner();
        let snapshot_id =
            crate::service::take_memory_snapshot(&self.state, &r.task_id, &r.idempotency_key)?;
        Ok(Response::new(router::TaskSnapshotMemoryResponse {
            snapshot_id,
        }))
    }
}
