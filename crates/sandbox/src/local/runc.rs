//! The OCI runtime, driven through its command line.
//!
//! Garrison keeps its containers under a runc state root of its own, so
//! `runc list` there is exactly Garrison's containers and nothing else on
//! the machine can be mistaken for one.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
use serde::Deserialize;

use super::cmd::{output, run};
use super::reaper;

/// The cgroup (below each hierarchy's root) of container `id`.
pub fn cgroups_path(id: &str) -> String {
    format!("/garrison/{id}")
}

/// Whether `/proc/<pid>/cgroup` text puts the process in `path` (in any
/// hierarchy: cgroup v1 lists one line per hierarchy, v2 one line).
fn in_cgroup(proc_cgroup: &str, path: &str) -> bool {
    proc_cgroup
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .any(|p| p == path)
}

/// Hands the process whose pid runc wrote in `pid_file` to the reaper.
fn adopt_recorded(pid_file: &Path) {
    if let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok())
    {
        reaper::adopt(pid);
    }
}

#[derive(Clone, Debug)]
pub struct Runc {
    pub binary: PathBuf,
    pub state_root: PathBuf,
}

/// What `runc state` reports.
#[derive(Debug, Deserialize)]
pub struct State {
    /// `created`, `running`, `paused` or `stopped`.
    #[serde(default)]
    pub status: String,
}

/// Longest a destroy waits for a killed init to die before leaving the
/// rest to `runc delete --force`; a healthy one needs milliseconds.
const DEATH_GUARD: std::time::Duration = std::time::Duration::from_secs(10);

impl Runc {
    fn args<'a>(&'a self, rest: &[&'a str]) -> Vec<String> {
        let mut v = vec!["--root".to_owned(), self.state_root.display().to_string()];
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    }

    async fn call(&self, rest: &[&str]) -> anyhow::Result<Vec<u8>> {
        let args = self.args(rest);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        output(&self.binary.to_string_lossy(), &refs, &[]).await
    }

    /// Runs a command that leaves a process behind. That process inherits
    /// runc's stdio, so pipes would never reach end-of-file: stdio is null
    /// and runc's own messages go to `log`, read back on failure.
    async fn call_detached(&self, log: &Path, rest: &[&str]) -> anyhow::Result<()> {
        let mut args = vec![
            "--root".to_owned(),
            self.state_root.display().to_string(),
            "--log".to_owned(),
            log.display().to_string(),
        ];
        args.extend(rest.iter().map(|s| s.to_string()));
        let status = tokio::process::Command::new(&self.binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .with_context(|| format!("running {}", self.binary.display()))?;
        if status.success() {
            return Ok(());
        }
        let log_text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: String = log_text
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join(" | ");
        anyhow::bail!(
            "runc {} failed ({status}): {tail}",
            rest.first().unwrap_or(&"")
        )
    }

    /// Starts the container's init detached: it outlives Garrison.
    pub async fn run_detached(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
    ) -> anyhow::Result<()> {
        let log = bundle.join("runc.log");
        let bundle = bundle.to_string_lossy();
        let pid_file = pid_file.to_string_lossy();
        self.call_detached(
            &log,
            &[
                "run",
                "--detach",
                "--bundle",
                &bundle,
                "--pid-file",
                &pid_file,
                id,
            ],
        )
        .await
        .with_context(|| format!("starting container {id}"))?;
        adopt_recorded(Path::new(pid_file.as_ref()));
        Ok(())
    }

    /// Starts a process in the container, detached; returns when it runs.
    /// Its pid is in `pid_file`; Garrison reaps it when it ends.
    pub async fn exec_detached(
        &self,
        id: &str,
        log: &Path,
        pid_file: &Path,
        cwd: &str,
        argv: &[&str],
    ) -> anyhow::Result<()> {
        let pid_file = pid_file.to_string_lossy();
        let mut rest = vec![
            "exec",
            "--detach",
            "--pid-file",
            &pid_file,
            "--cwd",
            cwd,
            id,
        ];
        rest.extend_from_slice(argv);
        self.call_detached(log, &rest)
            .await
            .with_context(|| format!("starting a process in {id}"))?;
        adopt_recorded(Path::new(pid_file.as_ref()));
        Ok(())
    }

    pub async fn state(&self, id: &str) -> Option<State> {
        let out = self.call(&["state", id]).await.ok()?;
        serde_json::from_slice(&out).ok()
    }

    /// Whether the container exists and runs (not paused, not stopped).
    pub async fn is_running(&self, id: &str) -> bool {
        self.state(id).await.is_some_and(|s| s.status == "running")
    }

    pub async fn pause(&self, id: &str) -> anyhow::Result<()> {
        self.call(&["pause", id]).await.map(drop)
    }

    pub async fn resume(&self, id: &str) -> anyhow::Result<()> {
        self.call(&["resume", id]).await.map(drop)
    }

    /// Kills every process and removes the container; gone is success.
    ///
    /// `init_pid` is the container's init as `run_detached` recorded it.
    /// runc's own `delete --force` checks every 100 ms whether the init has
    /// died; waiting for it here, on a pidfd, ends that wait the moment it
    /// dies, and `runc delete` then finds a stopped container.
    pub async fn delete(&self, id: &str, init_pid: Option<u32>) -> anyhow::Result<()> {
        let cgroup = cgroups_path(id);
        let init = init_pid.and_then(reaper::pidfd).filter(|_| {
            let pid = init_pid.unwrap_or_default();
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|text| in_cgroup(&text, &cgroup))
        });
        if let Some(init) = init {
            // Through runc, which also thaws a paused container (a frozen
            // process dies only once thawed).
            let _ = self.call(&["kill", id, "KILL"]).await;
            // Reaped here rather than by the reaper's thread a moment later,
            // so nothing of the container is left once destroy returns.
            let _ = tokio::task::spawn_blocking(move || {
                reaper::wait_exit(&init, DEATH_GUARD) && reaper::reap(&init)
            })
            .await;
        }
        let args = self.args(&["delete", "--force", id]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        match run(&self.binary.to_string_lossy(), &refs, &[]).await {
            Ok(()) => Ok(()),
            Err(_) if self.state(id).await.is_none() => Ok(()),
            Err(e) => Err(e.context(format!("deleting container {id}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_membership_is_an_exact_path_in_any_hierarchy() {
        let v1 = "12:pids:/garrison/sb-1\n3:cpu,cpuacct:/garrison/sb-1\n0::/\n";
        assert!(in_cgroup(v1, "/garrison/sb-1"));
        assert!(!in_cgroup(v1, "/garrison/sb"));
        assert!(in_cgroup("0::/garrison/sb-1\n", "/garrison/sb-1"));
        assert!(!in_cgroup("0::/garrison/sb-10\n", "/garrison/sb-1"));
        assert!(!in_cgroup("", "/garrison/sb-1"));
    }
}
