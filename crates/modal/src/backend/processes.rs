//! Commands in the sandbox, all through the command router of its running
//! task: the session's processes, started by the `LAUNCH` script of
//! [`crate::scripts`] and afterwards found through their directory under
//! the root (status, kill, output) by short execs, and one-off helper
//! commands run to completion.

use std::time::Duration;

use anyhow::anyhow;
use sandbox::{
    Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Result, SandboxError, is_plain_id,
};

use super::{ModalBackend, root_of, status_error};
use crate::exec::{self, Command};
use crate::scripts::{self, Reported};
use crate::wire;

/// Output kept from a helper command (status lines, error messages).
pub(super) const HELPER_OUTPUT: usize = 64 * 1024;

/// How long one `SandboxGetTaskId` may wait for the sandbox to be scheduled.
const SCHEDULE_WAIT_SECS: f32 = 55.0;

impl ModalBackend {
    /// The running task of a sandbox; gone once the sandbox has finished.
    pub(super) async fn task_id(&self, sandbox_id: &str) -> Result<String> {
        let request = wire::SandboxGetTaskIdRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: Some(SCHEDULE_WAIT_SECS),
            wait_until_ready: false,
        };
        let response = self
            .client
            .retrying("SandboxGetTaskIdV2", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_get_task_id_v2(request).await }
            })
            .await
            .map_err(|s| status_error("finding the sandbox's task", s))?;
        if response.task_result.is_some() {
            return Err(SandboxError::Gone(format!(
                "sandbox {sandbox_id} has ended"
            )));
        }
        response.task_id.ok_or_else(|| {
            SandboxError::Transient(anyhow!("sandbox {sandbox_id} is not scheduled yet"))
        })
    }

    pub(super) async fn run(
        &self,
        handle: &Handle,
        argv: Vec<String>,
        workdir: Option<String>,
        stdin: Option<&[u8]>,
        max_output: usize,
    ) -> Result<exec::Finished> {
        let task = self.handle_task(handle).await?;
        exec::run(
            &self.client,
            &task,
            &Command {
                argv,
                workdir,
                ..Command::default()
            },
            stdin,
            max_output,
        )
        .await
        .map_err(|s| status_error("running a command in the sandbox", s))
    }
}

pub(super) async fn spawn(
    backend: &ModalBackend,
    handle: &Handle,
    process: &ProcessSpec,
) -> Result<ProcessRef> {
    let dir = process_dir(handle, &process.name)?;
    let root = root_of(handle)?;
    if process.cwd != root && !scripts::inside(root, &process.cwd) {
        return Err(SandboxError::Fatal(anyhow!(
            "{} is outside sandbox {}",
            process.cwd,
            handle.name
        )));
    }
    if process.argv.is_empty() {
        return Err(SandboxError::Fatal(anyhow!("empty argv")));
    }
    let env = scripts::env_script(&process.env)
        .ok_or_else(|| SandboxError::Fatal(anyhow!("an environment variable name is not valid")))?;
    let task = backend.handle_task(handle).await?;
    let mut args = vec![dir];
    args.extend(process.argv.iter().cloned());
    let command = Command {
        argv: scripts::sh(scripts::LAUNCH, args),
        workdir: Some(process.cwd.clone()),
        env: [(scripts::LAUNCH_ENV.to_owned(), env)].into(),
    };
    let failed = |s| status_error("starting the process", s);
    let exec = exec::start(&backend.client, &task, &command)
        .await
        .map_err(failed)?;
    let (output, ended) = exec::read_output(
        &backend.client,
        &exec,
        exec::Stream::Stdout,
        HELPER_OUTPUT,
        |out| out.ends_with(b"started\n"),
    )
    .await
    .map_err(failed)?;
    if !ended {
        return Ok(ProcessRef {
            id: process.name.clone(),
        });
    }
    let code = exec::wait(&backend.client, &exec).await.map_err(failed)?;
    let (stderr, _) = exec::read_output(
        &backend.client,
        &exec,
        exec::Stream::Stderr,
        HELPER_OUTPUT,
        |_| false,
    )
    .await
    .map_err(failed)?;
    let said = String::from_utf8_lossy(&output);
    let complained = String::from_utf8_lossy(&stderr);
    if said.contains("started\n") {
        // It started and already ended: its exit file tells the rest.
        return Ok(ProcessRef {
            id: process.name.clone(),
        });
    }
    if code == scripts::LAUNCH_EXISTS {
        return Err(SandboxError::Fatal(anyhow!(
            "a process named {} exists already",
            process.name
        )));
    }
    Err(SandboxError::Fatal(anyhow!(
        "starting {} failed ({code}): {} {}",
        process.name,
        said.trim(),
        complained.trim()
    )))
}

pub(super) async fn status(
    backend: &ModalBackend,
    handle: &Handle,
    process: &ProcessRef,
) -> Result<ProcessStatus> {
    let dir = process_dir(handle, &process.id)?;
    let finished = backend
        .run(
            handle,
            scripts::sh(scripts::STATUS, [dir]),
            None,
            None,
            HELPER_OUTPUT,
        )
        .await?;
    let said = String::from_utf8_lossy(&finished.output);
    match scripts::parse_status(&said) {
        Some(Reported::Exited(code)) => Ok(ProcessStatus::Exited(code)),
        Some(Reported::Running) => Ok(ProcessStatus::Running),
        Some(Reported::Lost) => Ok(ProcessStatus::Lost),
        Some(Reported::Unknown) => Err(SandboxError::Gone(format!("process {}", process.id))),
        None => Err(SandboxError::Transient(anyhow!(
            "process status unreadable: {}",
            said.trim()
        ))),
    }
}

pub(super) async fn kill(
    backend: &ModalBackend,
    handle: &Handle,
    process: &ProcessRef,
    grace: Duration,
) -> Result<()> {
    let dir = process_dir(handle, &process.id)?;
    let tenths = (grace.as_millis() / 100).to_string();
    match backend
        .run(
            handle,
            scripts::sh(scripts::KILL, [dir, tenths]),
            None,
            None,
            HELPER_OUTPUT,
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_gone() => Ok(()),
        Err(e) => Err(e),
    }
}

pub(super) async fn read_output(
    backend: &ModalBackend,
    handle: &Handle,
    process: &ProcessRef,
    offset: u64,
    max: usize,
) -> Result<OutputChunk> {
    let dir = process_dir(handle, &process.id)?;
    let max = max.clamp(1, 4 * 1024 * 1024);
    let argv = scripts::sh(scripts::READ, [dir, offset.to_string(), max.to_string()]);
    let finished = backend.run(handle, argv, None, None, max).await?;
    match finished.exit_code {
        0 => {
            let next_offset = offset + finished.output.len() as u64;
            Ok(OutputChunk {
                data: finished.output,
                next_offset,
            })
        }
        scripts::READ_UNKNOWN => Err(SandboxError::Gone(format!("process {}", process.id))),
        code => Err(SandboxError::Transient(anyhow!(
            "reading output failed ({code})"
        ))),
    }
}

fn process_dir(handle: &Handle, process: &str) -> Result<String> {
    if !is_plain_id(process) {
        return Err(SandboxError::Fatal(anyhow!(
            "invalid process id {process:?}"
        )));
    }
    Ok(format!("{}/proc/{process}", root_of(handle)?))
}
