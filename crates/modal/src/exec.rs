//! Running commands in a sandbox through its task's command router, as
//! Modal's current clients do: `TaskExecStart` with a client-chosen exec id
//! and the environment as a map, `TaskExecStdinWrite` by byte offset,
//! `TaskExecStdioRead` by byte offset for stdout and for stderr (never
//! merged, so a failing helper's error message is kept), and
//! `TaskExecWait`.
//!
//! The older `ContainerExec*` RPCs are no longer used: Modal's Python client
//! (1.6.4) and Go SDK run every sandbox process through the router, and
//! Modal documents no case for which `ContainerExec` is still the way.

use std::collections::BTreeMap;

use tonic::Status;

use crate::client::Client;
use crate::wire::router;

/// stdin is sent in messages of at most this size.
const STDIN_CHUNK: usize = 1024 * 1024;
/// Client-side bound of one `TaskExecWait` (Modal's client uses a minute and
/// asks again), in seconds.
const WAIT_SECS: u64 = 60;

/// A command to run.
#[derive(Clone, Debug, Default)]
pub struct Command {
    /// The program and its arguments (no shell unless asked for).
    pub argv: Vec<String>,
    /// The working directory; `None` is the image's.
    pub workdir: Option<String>,
    /// Variables added to the sandbox's environment for this command.
    pub env: BTreeMap<String, String>,
}

/// What a command that ran to completion printed and returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The exit code (128 + N for death by signal N).
    pub exit_code: i32,
    /// stdout, at most the requested number of bytes.
    pub output: Vec<u8>,
    /// stderr, at most the requested number of bytes.
    pub stderr: Vec<u8>,
}

impl Finished {
    /// What to show of a failed command: its stderr, else its stdout.
    pub fn message(&self) -> String {
        let said = if self.stderr.iter().all(u8::is_ascii_whitespace) {
            &self.output
        } else {
            &self.stderr
        };
        String::from_utf8_lossy(said).trim().to_owned()
    }
}

/// A started command.
#[derive(Clone, Debug)]
pub struct Started {
    /// The task it runs in.
    pub task_id: String,
    /// Its id, chosen here: a retried start is the same command.
    pub exec_id: String,
}

/// Starts `command` in task `task_id`, with stdout and stderr piped apart.
pub async fn start(client: &Client, task_id: &str, command: &Command) -> Result<Started, Status> {
    let exec_id = new_exec_id();
    let request = router::TaskExecStartRequest {
        task_id: task_id.to_owned(),
        exec_id: exec_id.clone(),
        command_args: command.argv.clone(),
        stdout_config: router::TaskExecStdoutConfig::Pipe as i32,
        stderr_config: router::TaskExecStderrConfig::Pipe as i32,
        timeout_secs: None,
        workdir: command.workdir.clone(),
        env: command.env.clone().into_iter().collect(),
        secret_sources: Vec::new(),
    };
    client
        .routed("TaskExecStart", task_id, |mut rpc| {
            let request = request.clone();
            async move { rpc.task_exec_start(request).await }
        })
        .await?;
    Ok(Started {
        task_id: task_id.to_owned(),
        exec_id,
    })
}

/// A random exec id in the UUID shape Modal's clients use.
fn new_exec_id() -> String {
    let hex = format!("{:032x}", rand::random::<u128>());
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Sends `bytes` to the exec's stdin and closes it. Each message says at
/// which byte it starts, so a retried one is not written twice.
pub async fn send_stdin(client: &Client, exec: &Started, bytes: &[u8]) -> Result<(), Status> {
    let mut chunks: Vec<&[u8]> = bytes.chunks(STDIN_CHUNK).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    let mut offset = 0u64;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let request = router::TaskExecStdinWriteRequest {
            task_id: exec.task_id.clone(),
            exec_id: exec.exec_id.clone(),
            offset,
            data: chunk.to_vec(),
            eof: i == last,
        };
        client
            .routed("TaskExecStdinWrite", &exec.task_id, |mut rpc| {
                let request = request.clone();
                async move { rpc.task_exec_stdin_write(request).await }
            })
            .await?;
        offset += chunk.len() as u64;
    }
    Ok(())
}

/// Which output stream to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// stdout.
    Stdout,
    /// stderr.
    Stderr,
}

/// Reads one output stream from the start until `enough` says so or the
/// stream has ended, keeping at most `max` bytes. Returns the output and
/// whether the stream ended (the exec finished and all of it was read).
pub async fn read_output(
    client: &Client,
    exec: &Started,
    stream: Stream,
    max: usize,
    mut enough: impl FnMut(&[u8]) -> bool,
) -> Result<(Vec<u8>, bool), Status> {
    let file_descriptor = match stream {
        Stream::Stdout => router::TaskExecStdioFileDescriptor::Stdout,
        Stream::Stderr => router::TaskExecStdioFileDescriptor::Stderr,
    } as i32;
    let mut output = Vec::new();
    let mut offset = 0u64;
    loop {
        let request = router::TaskExecStdioReadRequest {
            task_id: exec.task_id.clone(),
            exec_id: exec.exec_id.clone(),
            offset,
            file_descriptor,
        };
        let mut messages = client
            .routed("TaskExecStdioRead", &exec.task_id, |mut rpc| {
                let request = request.clone();
                async move { rpc.task_exec_stdio_read(request).await }
            })
            .await?;
        loop {
            let message = match messages.message().await {
                Ok(Some(message)) => message,
                // The stream ends once the exec ended and all was sent.
                Ok(None) => return Ok((output, true)),
                // A broken stream resumes from the last byte read.
                Err(status) if crate::wire::is_retryable(status.code()) => break,
                Err(status) => return Err(status),
            };
            offset += message.data.len() as u64;
            let room = max.saturating_sub(output.len());
            output.extend_from_slice(&message.data[..message.data.len().min(room)]);
            if enough(&output) {
                return Ok((output, false));
            }
        }
    }
}

/// Waits for the exec to end and returns its exit code (128 + N for a
/// death by signal N).
pub async fn wait(client: &Client, exec: &Started) -> Result<i32, Status> {
    use router::task_exec_wait_response::ExitStatus;
    let request = router::TaskExecWaitRequest {
        task_id: exec.task_id.clone(),
        exec_id: exec.exec_id.clone(),
    };
    loop {
        let answer = client
            .routed("TaskExecWait", &exec.task_id, |mut rpc| {
                let mut request = tonic::Request::new(request.clone());
                request.set_timeout(std::time::Duration::from_secs(WAIT_SECS));
                async move { rpc.task_exec_wait(request).await }
            })
            .await;
        match answer {
            Ok(response) => {
                return Ok(match response.exit_status {
                    Some(ExitStatus::Code(code)) => code,
                    Some(ExitStatus::Signal(signal)) => 128 + signal,
                    // Ended without either: killed without a word.
                    None => 137,
                });
            }
            // Still running after a minute: ask again.
            Err(status) if status.code() == tonic::Code::DeadlineExceeded => {}
            Err(status) => return Err(status),
        }
    }
}

/// Runs `command` to completion, with `stdin` fed to it, reading stdout and
/// stderr side by side.
pub async fn run(
    client: &Client,
    task_id: &str,
    command: &Command,
    stdin: Option<&[u8]>,
    max_output: usize,
) -> Result<Finished, Status> {
    let exec = start(client, task_id, command).await?;
    if let Some(bytes) = stdin {
        send_stdin(client, &exec, bytes).await?;
    }
    let (stdout, stderr) = tokio::try_join!(
        read_output(client, &exec, Stream::Stdout, max_output, |_| false),
        read_output(client, &exec, Stream::Stderr, max_output, |_| false),
    )?;
    let exit_code = wait(client, &exec).await?;
    Ok(Finished {
        exit_code,
        output: stdout.0,
        stderr: stderr.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_ids_have_the_uuid_shape_and_differ() {
        let a = new_exec_id();
        let b = new_exec_id();
        assert_ne!(a, b);
        let parts: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12], "{a}");
    }

    #[test]
    fn a_failure_is_told_by_its_stderr_else_its_stdout() {
        let finished = |out: &str, err: &str| Finished {
            exit_code: 1,
            output: out.into(),
            stderr: err.into(),
        };
        assert_eq!(
            finished("partial\n", "no space left\n").message(),
            "no space left"
        );
        assert_eq!(finished("only stdout\n", " \n").message(), "only stdout");
    }
}
