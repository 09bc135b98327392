//! One host's `garrison serve`: a child process in the host's namespace
//! (this same binary), killed, restarted, paused and resumed by the fault
//! injector, its clock stepped (with libfaketime), its exits watched, its
//! state directory inspected at the end.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::clock::{self, FakeClock};

/// A `garrison serve` on one host.
pub(crate) struct Garrison {
    child: Child,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    /// Its state directory.
    pub(crate) state_dir: PathBuf,
    /// Its log (every incarnation appends).
    pub(crate) log: PathBuf,
    /// Its clock, if libfaketime is there (its variables are in `env`).
    clock: Option<FakeClock>,
}

/// How one Garrison is started.
pub(crate) struct Start {
    /// The namespace prefix (`nsenter ...`).
    pub prefix: Vec<String>,
    /// `serve`'s arguments.
    pub args: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Its state directory.
    pub state_dir: PathBuf,
    /// Its log file.
    pub log: PathBuf,
    /// Its clock, if libfaketime is there (its variables are in `env`).
    pub clock: Option<FakeClock>,
}

impl Garrison {
    /// Starts it.
    pub(crate) fn start(start: Start) -> anyhow::Result<Garrison> {
        let exe = std::env::current_exe().context("locating this binary")?;
        let mut argv = start.prefix;
        argv.push(exe.display().to_string());
        argv.extend(start.args);
        let child = spawn(&argv, &start.env, &start.log)?;
        Ok(Garrison {
            child,
            argv,
            env: start.env,
            state_dir: start.state_dir,
            log: start.log,
            clock: start.clock,
        })
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// SIGKILL, waited for; then what libfaketime left of it.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.clock.is_some() {
            clock::forget(self.child.id());
        }
    }

    /// Steps its wall clock `step_secs` from the true time (0: back to
    /// true); an error if it runs without libfaketime.
    pub(crate) fn step_clock(&self, step_secs: i64) -> anyhow::Result<()> {
        self.clock
            .as_ref()
            .context("this host's Garrison runs without libfaketime")?
            .step(step_secs)
    }

    /// A new process with the same arguments and state.
    pub(crate) fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        self.child = spawn(&self.argv, &self.env, &self.log)?;
        Ok(())
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`).
    pub(crate) fn pause(&self, paused: bool) {
        let signal = if paused {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        let _ = kill(self.pid(), signal);
    }

    /// `Some(status)` once it has exited.
    pub(crate) fn exited(&mut self) -> Option<String> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|status| status.to_string())
    }

    /// The last lines of its log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM (after SIGCONT, in case it is paused), then SIGKILL if it
    /// is still there after `patience`; then whatever remote it left.
    pub(crate) async fn stop(&mut self, patience: Duration) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = kill(self.pid(), Signal::SIGTERM);
        let deadline = std::time::Instant::now() + patience;
        while self.exited().is_none() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.kill9();
        crate::scale::kill_leftovers(&self.state_dir);
    }

    /// Sandboxes left in its state directory.
    pub(crate) fn sandboxes(&self) -> Vec<String> {
        let dir = self.state_dir.join("host").join("sandboxes");
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path().display().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Snapshot files left in its state directory.
    pub(crate) fn snapshot_files(&self) -> Vec<String> {
        let mut files = Vec::new();
        walk(&self.state_dir.join("snapshots"), &mut files);
        files
    }
}

fn walk(dir: &Path, files: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&entry.path(), files),
            Ok(_) => files.push(entry.path().display().to_string()),
            Err(_) => {}
        }
    }
}

fn spawn(argv: &[String], env: &[(String, String)], log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .context("starting garrison serve")
}

impl Drop for Garrison {
    fn drop(&mut self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        self.kill9();
        crate::scale::kill_leftovers(&self.state_dir);
    }
}
