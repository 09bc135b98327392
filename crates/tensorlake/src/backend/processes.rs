//! Processes in the sandbox: the session's managed processes (named after
//! the spec, never restarted by the daemon, their output also appended to
//! `OUTPUT_LOG` through `TEE_SCRIPT` so it can be followed from inside), and
//! the short helper commands Garrison runs to completion itself. The
//! daemon's process reports and line-based output are mapped onto
//! Garrison's statuses and byte offsets here.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::anyhow;
use sandbox::{
    Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Result, SandboxError, is_plain_id,
};

use futures::StreamExt;

use super::output::{READ_WINDOW, Reader};
use super::{OUTPUT_LOG, Poll, TRANSITION_GUARD, TensorlakeBackend, map_err};
use crate::client::found;
use crate::dataplane::{ProcessKey, SandboxClient};
use crate::models::{ProcessInfo, ProcessState, RestartConfig, RestartPolicy, StartProcess};

/// Runs `"$@"` with its output (stdout and stderr) through `tee -a "$1"`:
/// a fifo, so the process is `exec`ed and keeps its pid, exit status and
/// signals; the shell's own exported variables are dropped, so the
/// process still sees exactly its environment. Without `mkfifo` or `tee`
/// the process simply runs.
const TEE_SCRIPT: &str = r#"log=$1; shift
if command -v mkfifo >/dev/null 2>&1 && command -v tee >/dev/null 2>&1; then
  fifo="$log.$$.fifo"
  rm -f "$fifo"
  if mkfifo -m 600 "$fifo"; then
    { rm -f "$fifo"; umask 077; exec tee -a "$log"; } <"$fifo" &
    unset PWD OLDPWD SHLVL _
    exec "$@" >"$fifo" 2>&1
  fi
fi
unset PWD OLDPWD SHLVL _
exec "$@""#;

/// The end of a helper command's output kept for an error message.
const HELPER_OUTPUT_KEPT: usize = 64 << 10;

/// `PATH` for the helper processes Garrison runs itself.
const HELPER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl TensorlakeBackend {
    /// Runs a helper command to completion over one streaming request:
    /// its exit code and the end of its output (for an error message).
    async fn run(&self, dp: &SandboxClient, argv: &[&str]) -> Result<(ProcessStatus, String)> {
        let (command, args) = argv.split_first().expect("a command");
        let request = StartProcess {
            command: (*command).to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: BTreeMap::from([("PATH".to_owned(), HELPER_PATH.to_owned())]),
            working_dir: None,
            name: None,
            restart: None,
        };
        let run = tokio::time::timeout(
            TRANSITION_GUARD,
            dp.run_process(&request, HELPER_OUTPUT_KEPT),
        )
        .await
        .map_err(|_| SandboxError::Transient(anyhow!("{command} did not finish")))?
        .map_err(map_err)?;
        if !run.ended {
            return Err(SandboxError::Transient(anyhow!(
                "{command}: the run stream ended before the process"
            )));
        }
        let status = match (run.signal, run.exit_code) {
            (Some(signal), _) if (1..64).contains(&signal) => {
                ProcessStatus::Exited(128 + signal as i32)
            }
            (_, Some(code)) => {
                ProcessStatus::Exited(code.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
            }
            _ => ProcessStatus::Lost,
        };
        Ok((status, run.output))
    }

    pub(super) async fn run_ok(&self, dp: &SandboxClient, argv: &[&str]) -> Result<()> {
        match self.run(dp, argv).await? {
            (ProcessStatus::Exited(0), _) => Ok(()),
            (status, output) => Err(SandboxError::Fatal(anyhow!(
                "{} in the sandbox: {status:?}: {}",
                argv.join(" "),
                output.chars().take(2000).collect::<String>()
            ))),
        }
    }
}

pub(super) async fn spawn(
    backend: &TensorlakeBackend,
    handle: &Handle,
    process: &ProcessSpec,
) -> Result<ProcessRef> {
    if !is_plain_id(&process.name) || process.name.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SandboxError::Fatal(anyhow!(
            "invalid process name {:?}",
            process.name
        )));
    }
    let cwd = backend.inside(handle, &process.cwd)?;
    let (command, args) = process
        .argv
        .split_first()
        .ok_or_else(|| SandboxError::Fatal(anyhow!("empty argv")))?;
    let dp = backend.dataplane(handle).await?;
    let log = format!("{}/{OUTPUT_LOG}", backend.root(&handle.id));
    let mut wrapped = vec!["-c".to_owned(), TEE_SCRIPT.to_owned(), "sh".to_owned(), log];
    wrapped.push(command.clone());
    wrapped.extend(args.iter().cloned());
    let request = StartProcess {
        command: "/bin/sh".to_owned(),
        args: wrapped,
        env: process.env.clone(),
        working_dir: Some(cwd),
        name: Some(process.name.clone()),
        restart: Some(RestartConfig {
            policy: RestartPolicy::Never,
        }),
    };
    match dp.start_process(&request).await {
        Ok(_) => Ok(ProcessRef {
            id: process.name.clone(),
        }),
        Err(e) if e.is_conflict() => Err(SandboxError::Fatal(anyhow!(
            "a process named {} exists already in sandbox {}",
            process.name,
            handle.name
        ))),
        Err(e) => Err(map_err(e)),
    }
}

pub(super) async fn status(
    backend: &TensorlakeBackend,
    handle: &Handle,
    process: &ProcessRef,
) -> Result<ProcessStatus> {
    let key = process_key(process)?;
    let dp = backend.dataplane(handle).await?;
    match found(dp.get_process(&key).await).map_err(map_err)? {
        Some(info) => Ok(process_status(&info)),
        None => Err(SandboxError::Gone(format!("process {}", process.id))),
    }
}

pub(super) async fn kill(
    backend: &TensorlakeBackend,
    handle: &Handle,
    process: &ProcessRef,
    grace: Duration,
) -> Result<()> {
    let key = process_key(process)?;
    let dp = match backend.dataplane(handle).await {
        Ok(dp) => dp,
        Err(e) if e.is_gone() => return Ok(()),
        Err(e) => return Err(e),
    };
    let signal = async |number: i32| match dp.signal_process(&key, number).await {
        Ok(()) => Ok(true),
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(false),
        Err(e) => Err(map_err(e)),
    };
    if !signal(signal_number::TERM).await? {
        return Ok(());
    }
    let deadline = tokio::time::Instant::now() + grace;
    let mut poll = Poll::new();
    while tokio::time::Instant::now() < deadline {
        match found(dp.get_process(&key).await).map_err(map_err)? {
            Some(info) if process_status(&info) == ProcessStatus::Running => poll.wait().await,
            _ => return Ok(()),
        }
    }
    signal(signal_number::KILL).await?;
    Ok(())
}

pub(super) async fn read_output(
    backend: &TensorlakeBackend,
    handle: &Handle,
    process: &ProcessRef,
    offset: u64,
    max: usize,
) -> Result<OutputChunk> {
    let key = process_key(process)?;
    let slot = backend.readers.slot(&handle.id, &key);
    let mut held = slot.lock().await;
    let read = read_from(backend, handle, process, &key, &mut held, offset, max).await;
    let finished = held
        .as_ref()
        .is_some_and(|r| r.stream.is_none() && !r.has(offset));
    if read.is_err() || finished {
        *held = None;
        drop(held);
        backend.readers.forget(&handle.id, &key);
    }
    read
}

/// [`read_output`] with the process's reader in hand.
async fn read_from(
    backend: &TensorlakeBackend,
    handle: &Handle,
    process: &ProcessRef,
    key: &ProcessKey,
    held: &mut Option<Reader>,
    offset: u64,
    max: usize,
) -> Result<OutputChunk> {
    let gone = || SandboxError::Gone(format!("process {}", process.id));
    let dp = backend.dataplane(handle).await?;
    if held.as_ref().is_none_or(|r| r.passed(offset)) {
        let stream = found(dp.follow_output(key).await)
            .map_err(map_err)?
            .ok_or_else(gone)?;
        *held = Some(Reader::new(stream.boxed()));
    }
    let reader = held.as_mut().expect("opened above");
    let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
    // Whether the process has ended, asked at most once per read: an
    // ended process's stream ends after its last line, so the read waits
    // for that; a running one's read returns what has come.
    let mut ended: Option<bool> = None;
    loop {
        reader.drain_ready(offset, max).map_err(map_err)?;
        if reader.holds(offset, max) || reader.stream.is_none() {
            break;
        }
        if reader.has(offset) {
            if ended.is_none() {
                ended = Some(has_ended(&dp, key).await?.ok_or_else(gone)?);
            }
            if ended == Some(false) {
                break;
            }
        }
        let stream = reader.stream.as_mut().expect("checked above");
        match tokio::time::timeout(READ_WINDOW, stream.next()).await {
            Ok(Some(event)) => reader.push(&event.map_err(map_err)?.line, offset),
            Ok(None) => reader.stream = None,
            Err(_) => {
                if ended.is_none() {
                    ended = Some(has_ended(&dp, key).await?.ok_or_else(gone)?);
                }
                if ended == Some(false) || tokio::time::Instant::now() > deadline {
                    break;
                }
            }
        }
    }
    Ok(reader.chunk(offset, max))
}

/// Whether the process has ended; `None` when the daemon knows it not.
async fn has_ended(dp: &SandboxClient, key: &ProcessKey) -> Result<Option<bool>> {
    Ok(found(dp.get_process(key).await)
        .map_err(map_err)?
        .map(|info| process_status(&info) != ProcessStatus::Running))
}

/// Signal numbers (Linux): the daemon takes numbers.
mod signal_number {
    pub(super) const TERM: i32 = 15;
    pub(super) const KILL: i32 = 9;
}

/// What became of a process, from the daemon's report.
pub(crate) fn process_status(info: &ProcessInfo) -> ProcessStatus {
    let code = |c: i64| ProcessStatus::Exited(c.clamp(i32::MIN as i64, i32::MAX as i64) as i32);
    match (&info.status, info.exit_code, info.signal) {
        (ProcessState::Running, _, _) => ProcessStatus::Running,
        (ProcessState::OomKilled, _, _) => ProcessStatus::Exited(128 + 9),
        (_, _, Some(signal)) if (1..64).contains(&signal) => code(128 + signal),
        (_, Some(exit), _) => code(exit),
        (ProcessState::Exited | ProcessState::Signaled, None, _) => ProcessStatus::Lost,
        // A state this client does not know, with no exit: not ended.
        (ProcessState::Unknown(_), None, _) => ProcessStatus::Running,
    }
}

fn process_key(process: &ProcessRef) -> Result<ProcessKey> {
    if is_plain_id(&process.id) && !process.id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(ProcessKey::Name(process.id.clone()))
    } else {
        Err(SandboxError::Fatal(anyhow!(
            "invalid process id {:?}",
            process.id
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        let info = |status: &str, exit_code, signal| ProcessInfo {
            pid: 1,
            status: ProcessState::from(status),
            exit_code,
            signal,
            command: None,
            args: Vec::new(),
            started_at: None,
            managed: None,
        };
        assert_eq!(
            process_status(&info("running", None, None)),
            ProcessStatus::Running
        );
        assert_eq!(
            process_status(&info("exited", Some(3), None)),
            ProcessStatus::Exited(3)
        );
        assert_eq!(
            process_status(&info("signaled", None, Some(15))),
            ProcessStatus::Exited(143)
        );
        assert_eq!(
            process_status(&info("exited", None, None)),
            ProcessStatus::Lost
        );
        assert_eq!(
            process_status(&info("zombie", None, None)),
            ProcessStatus::Running
        );
        assert_eq!(
            process_status(&info("zombie", Some(1), None)),
            ProcessStatus::Exited(1)
        );
    }
}
