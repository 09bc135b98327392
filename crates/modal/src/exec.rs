//! Running commands in a sandbox with `ContainerExec`: start, feed stdin,
//! collect output, wait for the exit code.
//!
//! Garrison uses the `ContainerExec*` RPCs of `modal.client.ModalClient`
//! rather than the newer per-task "command router" service: they are part
//! of the same documented service as everything else Garrison calls, need
//! no second endpoint or token, and an exec keeps running in the sandbox
//! whether or not a client is attached.

use tonic::Status;

use crate::client::Client;
use crate::wire;

/// stdin is sent in messages of at most this size.
const STDIN_CHUNK: usize = 1024 * 1024;
/// Server-side wait of one output or wait call, in seconds (Modal's clients
/// use just under a minute so proxies do not cut the stream).
const LONG_POLL_SECS: f32 = 55.0;

/// A command to run.
#[derive(Clone, Debug, Default)]
pub struct Command {
    /// The program and its arguments (no shell unless asked for).
    pub argv: Vec<String>,
    /// The working directory; `None` is the image's.
    pub workdir: Option<String>,
}

/// What a command that ran to completion printed and returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The exit code (128 + N for death by signal N).
    pub exit_code: i32,
    /// stdout and stderr merged, at most the requested number of bytes.
    pub output: Vec<u8>,
}

/// Starts `command` in task `task_id`, with stderr merged into stdout.
pub async fn start(client: &Client, task_id: &str, command: &Command) -> Result<String, Status> {
    let request = wire::ContainerExecRequest {
        task_id: task_id.to_owned(),
        command: command.argv.clone(),
        stdout_output: wire::ExecOutputOption::Pipe as i32,
        stderr_output: wire::ExecOutputOption::Stdout as i32,
        timeout_secs: 0,
        workdir: command.workdir.clone(),
    };
    let response = client
        .retrying_creation("ContainerExec", |mut rpc| {
            let request = request.clone();
            async move { rpc.container_exec(request).await }
        })
        .await?;
    Ok(response.exec_id)
}

/// Sends `bytes` to the exec's stdin and closes it.
pub async fn send_stdin(client: &Client, exec_id: &str, bytes: &[u8]) -> Result<(), Status> {
    let mut chunks: Vec<&[u8]> = bytes.chunks(STDIN_CHUNK).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let request = wire::ContainerExecPutInputRequest {
            exec_id: exec_id.to_owned(),
            input: Some(wire::RuntimeInputMessage {
                message: chunk.to_vec(),
                // Modal numbers input messages from 1; a repeated index is
                // ignored, which makes a retried message harmless.
                message_index: i as u64 + 1,
                eof: i == last,
            }),
        };
        client
            .retrying("ContainerExecPutInput", |mut rpc| {
                let request = request.clone();
                async move { rpc.container_exec_put_input(request).await }
            })
            .await?;
    }
    Ok(())
}

/// Reads the exec's output from the start until `enough` says so or the
/// exec has ended, keeping at most `max` bytes. Returns the output and
/// whether the exec ended (its last batch was read).
pub async fn read_output(
    client: &Client,
    exec_id: &str,
    max: usize,
    mut enough: impl FnMut(&[u8]) -> bool,
) -> Result<(Vec<u8>, bool), Status> {
    let mut output = Vec::new();
    let mut last_batch_index = 0;
    loop {
        let request = wire::ContainerExecGetOutputRequest {
            exec_id: exec_id.to_owned(),
            timeout: LONG_POLL_SECS,
            last_batch_index,
            file_descriptor: wire::FileDescriptor::Stdout as i32,
            get_raw_bytes: true,
        };
        let mut stream = client
            .retrying("ContainerExecGetOutput", |mut rpc| {
                let request = request.clone();
                async move { rpc.container_exec_get_output(request).await }
            })
            .await?;
        loop {
            let batch = match stream.message().await {
                Ok(Some(batch)) => batch,
                Ok(None) => break,
                // A broken stream resumes after the last batch read.
                Err(status) if wire::is_retryable(status.code()) => break,
                Err(status) => return Err(status),
            };
            last_batch_index = batch.batch_index;
            for item in batch.items {
                let bytes = if item.message_bytes.is_empty() {
                    item.message.into_bytes()
                } else {
                    item.message_bytes
                };
                let room = max.saturating_sub(output.len());
                output.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            if batch.exit_code.is_some() {
                return Ok((output, true));
            }
            if enough(&output) {
                return Ok((output, false));
            }
        }
    }
}

/// Waits for the exec to end and returns its exit code.
pub async fn wait(client: &Client, exec_id: &str) -> Result<i32, Status> {
    loop {
        let request = wire::ContainerExecWaitRequest {
            exec_id: exec_id.to_owned(),
            timeout: LONG_POLL_SECS,
        };
        let response = client
            .retrying("ContainerExecWait", |mut rpc| {
                let request = request.clone();
                async move { rpc.container_exec_wait(request).await }
            })
            .await?;
        if response.completed {
            // No code for a completed exec: it was killed without one.
            return Ok(response.exit_code.unwrap_or(137));
        }
    }
}

/// Runs `command` to completion, with `stdin` fed to it.
pub async fn run(
    client: &Client,
    task_id: &str,
    command: &Command,
    stdin: Option<&[u8]>,
    max_output: usize,
) -> Result<Finished, Status> {
    let exec_id = start(client, task_id, command).await?;
    if let Some(bytes) = stdin {
        send_stdin(client, &exec_id, bytes).await?;
    }
    let (output, _) = read_output(client, &exec_id, max_output, |_| false).await?;
    let exit_code = wait(client, &exec_id).await?;
    Ok(Finished { exit_code, output })
}
