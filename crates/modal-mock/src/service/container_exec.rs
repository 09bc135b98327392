//! The legacy process path: `ContainerExec` and its output, input and wait.

use std::sync::Arc;

use modal::wire;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{Stream_, poll_limit};
use crate::exec::{Exec, Fd};
use crate::ids::new_id;
use crate::state::State;

fn exec_by_id(state: &State, exec_id: &str) -> Result<Arc<Exec>, Status> {
    state
        .inner
        .lock()
        .unwrap()
        .execs
        .get(exec_id)
        .cloned()
        .ok_or_else(|| Status::not_found(format!("exec {exec_id} not found")))
}

/// What an exec needs of the running sandbox a task belongs to.
pub(super) struct TaskSandbox {
    pub id: String,
    pub dir: std::path::PathBuf,
    /// The variables of its Secrets, which its processes get.
    pub env: Vec<(String, String)>,
}

/// The running sandbox a task id belongs to.
pub(super) fn task_sandbox(state: &State, task_id: &str) -> Result<TaskSandbox, Status> {
    let inner = state.inner.lock().unwrap();
    let sandbox = inner
        .sandboxes
        .iter()
        .find(|s| s.task_id == task_id)
        .ok_or_else(|| Status::not_found(format!("task {task_id} not found")))?;
    if sandbox.result.is_some() {
        return Err(Status::failed_precondition(format!(
            "task {task_id} has finished"
        )));
    }
    Ok(TaskSandbox {
        id: sandbox.view.id.clone(),
        dir: sandbox.view.dir.clone(),
        env: sandbox.env.clone(),
    })
}

pub(super) async fn container_exec(
    state: &Arc<State>,
    request: Request<wire::ContainerExecRequest>,
) -> Result<Response<wire::ContainerExecResponse>, Status> {
    state.enter("ContainerExec")?;
    let r = request.into_inner();
    if r.command.is_empty() {
        return Err(Status::invalid_argument("command is empty"));
    }
    let task = task_sandbox(state, &r.task_id)?;
    let cwd = r.workdir.map(std::path::PathBuf::from).unwrap_or(task.dir);
    let merge = r.stderr_output == wire::ExecOutputOption::Stdout as i32;
    let exec = Exec::start(&task.id, &r.command, &cwd, &task.env, merge);
    let exec_id = new_id("ce");
    state
        .inner
        .lock()
        .unwrap()
        .execs
        .insert(exec_id.clone(), exec);
    Ok(Response::new(wire::ContainerExecResponse { exec_id }))
}

pub(super) async fn container_exec_get_output(
    state: &Arc<State>,
    request: Request<wire::ContainerExecGetOutputRequest>,
) -> Result<Response<Stream_<wire::RuntimeOutputBatch>>, Status> {
    state.enter("ContainerExecGetOutput")?;
    let r = request.into_inner();
    let exec = exec_by_id(state, &r.exec_id)?;
    let fd = match wire::FileDescriptor::try_from(r.file_descriptor) {
        Ok(wire::FileDescriptor::Stderr) => Fd::Stderr,
        Ok(wire::FileDescriptor::Stdout) => Fd::Stdout,
        _ => {
            return Err(Status::invalid_argument(
                "file_descriptor must be stdout or stderr",
            ));
        }
    };
    let limit = poll_limit(r.timeout);
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + limit;
        let mut last = r.last_batch_index;
        let mut changed = exec.subscribe();
        loop {
            changed.borrow_and_update();
            let batches = exec.batches_after(fd, last);
            for (index, bytes) in batches.items {
                last = index;
                let message = wire::RuntimeOutputMessage {
                    file_descriptor: r.file_descriptor,
                    message: if r.get_raw_bytes {
                        String::new()
                    } else {
                        String::from_utf8_lossy(&bytes).into_owned()
                    },
                    message_bytes: if r.get_raw_bytes { bytes } else { Vec::new() },
                };
                let batch = wire::RuntimeOutputBatch {
                    items: vec![message],
                    batch_index: index,
                    exit_code: None,
                };
                if tx.send(Ok(batch)).await.is_err() {
                    return;
                }
            }
            if let Some(code) = batches.exit {
                let _ = tx
                    .send(Ok(wire::RuntimeOutputBatch {
                        items: Vec::new(),
                        batch_index: batches.total + 1,
                        exit_code: Some(code),
                    }))
                    .await;
                return;
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

pub(super) async fn container_exec_put_input(
    state: &Arc<State>,
    request: Request<wire::ContainerExecPutInputRequest>,
) -> Result<Response<()>, Status> {
    state.enter("ContainerExecPutInput")?;
    let r = request.into_inner();
    let exec = exec_by_id(state, &r.exec_id)?;
    let input = r
        .input
        .ok_or_else(|| Status::invalid_argument("input is required"))?;
    if input.message_index == 0 {
        return Err(Status::invalid_argument("message_index starts at 1"));
    }
    exec.put_input(input.message_index, input.message, input.eof)
        .await;
    Ok(Response::new(()))
}

pub(super) async fn container_exec_wait(
    state: &Arc<State>,
    request: Request<wire::ContainerExecWaitRequest>,
) -> Result<Response<wire::ContainerExecWaitResponse>, Status> {
    state.enter("ContainerExecWait")?;
    let r = request.into_inner();
    let exec = exec_by_id(state, &r.exec_id)?;
    let mut changed = exec.subscribe();
    let deadline = tokio::time::Instant::now() + poll_limit(r.timeout);
    loop {
        changed.borrow_and_update();
        if let Some(code) = exec.exit_code() {
            return Ok(Response::new(wire::ContainerExecWaitResponse {
                exit_code: Some(code),
                completed: true,
            }));
        }
        if tokio::time::timeout_at(deadline, changed.changed())
            .await
            .is_err()
        {
            return Ok(Response::new(wire::ContainerExecWaitResponse {
                exit_code: None,
                completed: false,
            }));
        }
    }
}
