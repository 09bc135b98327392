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
        .with_context(|| format!("starting container {id}"))
    }

    /// Starts a process in the container, detached; returns when it runs.
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
            .with_context(|| format!("starting a process in {id}"))
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
    pub async fn delete(&self, id: &str) -> anyhow::Result<()> {
        if self.state(id).await.is_none() {
            return Ok(());
        }
        let _ = self.call(&["kill", id, "KILL"]).await;
        let args = self.args(&["delete", "--force", id]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        match run(&self.binary.to_string_lossy(), &refs, &[]).await {
            Ok(()) => Ok(()),
            Err(_) if self.state(id).await.is_none() => Ok(()),
            Err(e) => Err(e.context(format!("deleting container {id}"))),
        }
    }
}
