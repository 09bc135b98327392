//! Processes in a sandbox: each runs under the shim inside the container,
//! which records the child's pid, output and exit code; the host starts the
//! shim with `runc exec`, reads those records through the overlay, and
//! signals the child's process group directly by its host pid.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{LocalBackend, fatal};
use crate::oci;
use crate::rootfs::Root;
use crate::runc::Runtime;
use sandbox::{Handle, ProcessRef, ProcessSpec, ProcessStatus, Result, SandboxError, is_plain_id};
use shim::{self, CHILD_PID_FILE, ERROR_FILE, EXIT_FILE, REQUEST_FILE, ShimRequest};

const SHIM_PID_FILE: &str = "shim.pid";
/// Where `runc exec --pid-file` leaves the shim's pid (under runsc, the pid
/// of the `runsc exec` process that waits for the shim inside gVisor: it
/// lives exactly as long as the shim, which is all the record is used for).
const EXEC_PID_FILE: &str = "exec.pid";
/// How long a started shim may take to report its child.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl LocalBackend {
    pub(super) fn proc_path(process: &ProcessRef, file: &str) -> Result<String> {
        if !is_plain_id(&process.id) {
            return Err(fatal(anyhow!("invalid process id {:?}", process.id)));
        }
        Ok(format!("{}/{}/{file}", oci::PROC_DIR, process.id))
    }

    /// The shim's `pid start-time` record. When Garrison died between
    /// `runc exec` starting the shim and writing the record, it is made now
    /// from the pid file runc wrote: otherwise a live remote would read as
    /// gone and a restart would start a second one beside it.
    fn shim_record(&self, handle: &Handle, process: &ProcessRef) -> Result<Option<String>> {
        let dir = self.existing_dir(handle)?.join("proc").join(&process.id);
        if let Ok(record) = std::fs::read_to_string(dir.join(SHIM_PID_FILE)) {
            return Ok(Some(record));
        }
        let Some(shim_pid) = std::fs::read_to_string(dir.join(EXEC_PID_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            return Ok(None);
        };
        let record = shim_record_of(shim_pid);
        shim::write_atomically(&dir.join(SHIM_PID_FILE), record.as_bytes()).map_err(fatal)?;
        Ok(Some(record))
    }

    pub(super) fn process_status(
        &self,
        handle: &Handle,
        process: &ProcessRef,
    ) -> Result<ProcessStatus> {
        let root = self.root(handle)?;
        let read_exit = |root: &Root| -> Result<Option<i32>> {
            match root.read_small(&Self::proc_path(process, EXIT_FILE)?, 32) {
                Ok(bytes) => Ok(Some(
                    String::from_utf8_lossy(&bytes)
                        .trim()
                        .parse()
                        .unwrap_or(255),
                )),
                Err(_) => Ok(None),
            }
        };
        if let Some(code) = read_exit(&root)? {
            return Ok(ProcessStatus::Exited(code));
        }
        match self.shim_record(handle, process)? {
            None => Err(SandboxError::Gone(format!("process {}", process.id))),
            Some(record) if shim::is_alive(&record) => Ok(ProcessStatus::Running),
            Some(_) => Ok(read_exit(&root)?
                .map(ProcessStatus::Exited)
                .unwrap_or(ProcessStatus::Lost)),
        }
    }

    /// The host pid of the process the shim started (the shim's only
    /// child), so signals reach it without entering the container.
    fn child_host_pid(record: &str) -> Option<i32> {
        let shim_pid: i32 = record.split_whitespace().next()?.parse().ok()?;
        let children =
            std::fs::read_to_string(format!("/proc/{shim_pid}/task/{shim_pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    async fn signal(&self, handle: &Handle, process: &ProcessRef, signal: Signal) -> Result<()> {
        let Some(record) = self.shim_record(handle, process)? else {
            return Ok(());
        };
        if !shim::is_alive(&record) {
            return Ok(());
        }
        let runc = self.runtime_of(&handle.name);
        if runc.runtime == Runtime::Runsc {
            // The child's pid in gVisor's kernel, as the shim recorded it
            // (the sandbox can rewrite it, but can only name its own
            // processes to a killer that runs inside it).
            let root = self.root(handle)?;
            let child = root
                .read_small(&Self::proc_path(process, CHILD_PID_FILE)?, 64)
                .ok()
                .and_then(|b| {
                    String::from_utf8_lossy(&b)
                        .split_whitespace()
                        .next()?
                        .parse::<i32>()
                        .ok()
                });
            if let Some(child) = child {
                let (signal, child) = ((signal as i32).to_string(), child.to_string());
                let argv = [oci::SHIM, shim::KILL_GROUP_ARG, &signal, &child];
                if let Err(e) = runc.exec_wait(&handle.name, &argv).await {
                    tracing::debug!(sandbox = %handle.name, error = %e, "signalling in gVisor");
                }
            }
        } else if let Some(child) = Self::child_host_pid(&record) {
            let _ = killpg(Pid::from_raw(child), signal);
        }
        Ok(())
    }

    /// `Sandbox::spawn`: the shim is started with its request, and the
    /// process counts as started only once the shim recorded its child.
    pub(super) async fn spawn_process(
        &self,
        handle: &Handle,
        process: &ProcessSpec,
    ) -> Result<ProcessRef> {
        if !is_plain_id(&process.name) {
            return Err(fatal(anyhow!("invalid process name {:?}", process.name)));
        }
        let dir = self.existing_dir(handle)?;
        let root = self.writable_root(handle)?;
        let inside = format!("{}/{}", oci::PROC_DIR, process.name);
        root.create_dir_new(&inside, 0o700)
            .map_err(|e| fatal(anyhow!("process {}: {e}", process.name)))?;
        let host_dir = dir.join("proc").join(&process.name);
        std::fs::create_dir_all(&host_dir).map_err(fatal)?;
        let request = ShimRequest {
            argv: process.argv.clone(),
            env: Self::process_env(&dir, &process.env).map_err(fatal)?,
            cwd: PathBuf::from(&process.cwd),
            dir: PathBuf::from(&inside),
        };
        let request = serde_json::to_vec(&request).map_err(fatal)?;
        root.write(&format!("{inside}/{REQUEST_FILE}"), &request, 0o600)
            .map_err(fatal)?;

        let pid_file = host_dir.join(EXEC_PID_FILE);
        self.runtime_of(&handle.name)
            .exec_detached(
                &handle.name,
                &host_dir.join("runc.log"),
                &pid_file,
                "/",
                &[oci::SHIM, shim::SHIM_FILE_ARG, &inside],
            )
            .await
            .map_err(fatal)?;
        let shim_pid: u32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| fatal(anyhow!("runc wrote no pid for {}", process.name)))?;
        let record = shim_record_of(shim_pid);
        shim::write_atomically(&host_dir.join(SHIM_PID_FILE), record.as_bytes()).map_err(fatal)?;

        // Started once the shim recorded its child (or reported why not).
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(message) = root.read_small(&format!("{inside}/{ERROR_FILE}"), 4096) {
                return Err(fatal(anyhow!("{}", String::from_utf8_lossy(&message))));
            }
            if root.exists(&format!("{inside}/{CHILD_PID_FILE}"))
                || root.exists(&format!("{inside}/{EXIT_FILE}"))
            {
                return Ok(ProcessRef {
                    id: process.name.clone(),
                });
            }
            if !shim::is_alive(&record) && !root.exists(&format!("{inside}/{EXIT_FILE}")) {
                return Err(fatal(anyhow!(
                    "the shim of {} died before starting it",
                    process.name
                )));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Transient(anyhow!(
                    "{} did not start within {START_TIMEOUT:?}",
                    process.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// `Sandbox::kill`: SIGTERM to the child's process group, SIGKILL once
    /// `grace` is up.
    pub(super) async fn kill_process(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        grace: Duration,
    ) -> Result<()> {
        match self.process_status(handle, process) {
            Ok(ProcessStatus::Running) => {}
            Ok(_) => return Ok(()),
            Err(e) if e.is_gone() => return Ok(()),
            Err(e) => return Err(e),
        }
        self.signal(handle, process, Signal::SIGTERM).await?;
        let deadline = tokio::time::Instant::now() + grace;
        while matches!(
            self.process_status(handle, process),
            Ok(ProcessStatus::Running)
        ) && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.signal(handle, process, Signal::SIGKILL).await
    }
}

/// A shim's `pid start-time` record (the start time tells a reused pid
/// from the shim).
fn shim_record_of(shim_pid: u32) -> String {
    format!(
        "{shim_pid} {}",
        shim::proc_start_time(shim_pid).unwrap_or(0)
    )
}
