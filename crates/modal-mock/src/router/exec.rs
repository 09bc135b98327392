//! Processes on the command router: started with a client-chosen exec id
//! and an environment, their stdout and stderr read by byte offset, waited
//! for or polled.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use modal::wire::router;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::running_task;
use crate::exec::{Exec, Fd};
use crate::state::State;

pub(super) type StdioStream =
    Pin<Box<dyn Stream<Item = Result<router::TaskExecStdioReadResponse, Status>> + Send>>;

/// Most bytes one stdio message carries.
const CHUNK: usize = 64 * 1024;

fn exec_of(state: &State, task_id: &str, exec_id: &str) -> Result<Arc<Exec>, Status> {
    let inner = state.inner.lock().unwrap();
    let sandbox_id = &inner
        .sandboxes
        .iter()
        .find(|s| s.task_id == task_id)
        .ok_or_else(|| Status::not_found(format!("task {task_id} not found")))?
        .view
        .id;
    inner
        .execs
        .get(exec_id)
        .filter(|e| e.sandbox_id == *sandbox_id)
        .cloned()
        .ok_or_else(|| Status::not_found(format!("exec {exec_id} not found")))
}

pub(super) async fn start(
    state: &Arc<State>,
    request: Request<router::TaskExecStartRequest>,
) -> Result<Response<router::TaskExecStartResponse>, Status> {
    state.enter("TaskExecStart")?;
    let r = request.into_inner();
    if r.command_args.is_empty() {
        return Err(Status::invalid_argument("command_args is empty"));
    }
    if r.exec_id.is_empty() || r.exec_id.len() > 128 {
        return Err(Status::invalid_argument("exec_id is 1 to 128 characters"));
    }
    let task = running_task(state, &r.task_id)?;
    // The exec id is the client's: a retried start is the same process.
    if state.inner.lock().unwrap().execs.contains_key(&r.exec_id) {
        return Ok(Response::new(router::TaskExecStartResponse {}));
    }
    let cwd = r.workdir.map(std::path::PathBuf::from).unwrap_or(task.dir);
    let merge = r.stderr_config == router::TaskExecStderrConfig::Stdout as i32;
    // The sandbox's variables, then the exec's (`env`, then inline sources).
    let mut own: Vec<(String, String)> = r.env.into_iter().collect();
    own.sort();
    let mut env = task.env;
    env.extend(own);
    env.extend(crate::service::secret_env(state, &[], &r.secret_sources)?);
    let exec = Exec::start(&task.sandbox_id, &r.command_args, &cwd, &env, merge);
    state.inner.lock().unwrap().execs.insert(r.exec_id, exec);
    Ok(Response::new(router::TaskExecStartResponse {}))
}

pub(super) async fn stdio_read(
    state: &Arc<State>,
    request: Request<router::TaskExecStdioReadRequest>,
) -> Result<Response<StdioStream>, Status> {
    state.enter("TaskExecStdioRead")?;
    let r = request.into_inner();
    let exec = exec_of(state, &r.task_id, &r.exec_id)?;
    let fd = match router::TaskExecStdioFileDescriptor::try_from(r.file_descriptor) {
        Ok(router::TaskExecStdioFileDescriptor::Stdout) => Fd::Stdout,
        Ok(router::TaskExecStdioFileDescriptor::Stderr) => Fd::Stderr,
        Err(_) => {
            return Err(Status::invalid_argument(
                "file_descriptor is stdout or stderr",
            ));
        }
    };
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut offset = r.offset;
        let mut changed = exec.subscribe();
        loop {
            changed.borrow_and_update();
            let (data, complete) = exec.bytes_from(fd, offset);
            for chunk in data.chunks(CHUNK) {
                offset += chunk.len() as u64;
                let message = router::TaskExecStdioReadResponse {
                    data: chunk.to_vec(),
                };
                if tx.send(Ok(message)).await.is_err() {
                    return;
                }
            }
            // The stream ends once the process ended and all of it was sent.
            if complete && exec.bytes_from(fd, offset).0.is_empty() {
                return;
            }
            if changed.changed().await.is_err() {
                return;
            }
        }
    });
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

pub(super) async fn stdin_write(
    state: &Arc<State>,
    request: Request<router::TaskExecStdinWriteRequest>,
) -> Result<Response<router::TaskExecStdinWriteResponse>, Status> {
    state.enter("TaskExecStdinWrite")?;
    let r = request.into_inner();
    let exec = exec_of(state, &r.task_id, &r.exec_id)?;
    exec.write_input_at(r.offset, &r.data, r.eof)
        .await
        .map_err(|written| {
            Status::invalid_argument(format!(
                "offset {} is past the {written} bytes written",
                r.offset
            ))
        })?;
    Ok(Response::new(router::TaskExecStdinWriteResponse {}))
}

fn exit_status(code: i32) -> router::task_exec_wait_response::ExitStatus {
    // The mock records a signal death as 128 + signal, as a shell does.
    router::task_exec_wait_response::ExitStatus::Code(code)
}

pub(super) async fn wait(
    state: &Arc<State>,
    request: Request<router::TaskExecWaitRequest>,
) -> Result<Response<router::TaskExecWaitResponse>, Status> {
    state.enter("TaskExecWait")?;
    let r = request.into_inner();
    let exec = exec_of(state, &r.task_id, &r.exec_id)?;
    let mut changed = exec.subscribe();
    loop {
        changed.borrow_and_update();
        if let Some(code) = exec.exit_code() {
            return Ok(Response::new(router::TaskExecWaitResponse {
                exit_status: Some(exit_status(code)),
            }));
        }
        if changed.changed().await.is_err() {
            return Err(Status::unavailable("the exec went away"));
        }
    }
}

pub(super) async fn poll(
    state: &Arc<State>,
    request: Request<router::TaskExecPollRequest>,
) -> Result<Response<router::TaskExecPollResponse>, Status> {
    state.enter("TaskExecPoll")?;
    let r = request.into_inner();
    let exec = exec_of(state, &r.task_id, &r.exec_id)?;
    Ok(Response::new(router::TaskExecPollResponse {
        exit_status: exec
            .exit_code()
            .map(router::task_exec_poll_response::ExitStatus::Code),
    }))
}
