//! The `garrison serve` that `garrison bench scale` measures: a child
//! process started from this binary, its `/proc` use read while it runs,
//! and whatever remote a failed run left behind killed after it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use emulator::Emulator;
use orchestrator::Store;
use sandbox::plugin::BackendPlugin;

use super::proc;

/// Bounds each wait that does not scale with the session count.
pub(super) const HANG_GUARD: Duration = Duration::from_secs(120);

/// The `garrison serve` under measurement.
pub(super) struct Garrison {
    child: tokio::process::Child,
    pid: u32,
    pub(super) admin: SocketAddr,
    state_dir: PathBuf,
    log: PathBuf,
}

impl Garrison {
    pub(super) fn start(
        emu: &Emulator,
        outpost: &str,
        root: &Path,
        max_concurrent: usize,
    ) -> anyhow::Result<Garrison> {
        let state_dir = root.join("state");
        let config_dir = root.join("config");
        std::fs::create_dir_all(&config_dir)?;
        let log = root.join("garrison.log");
        let admin = free_loopback_port()?;
        let exe = std::env::current_exe().context("locating this binary")?;
        let child = tokio::process::Command::new(exe)
            .arg("serve")
            .args(["--outpost", outpost])
            .args(["--api-url", &emu.base_url()])
            .args(["--static-base-url", &emu.static_base_url()])
            .args(["--backend", ::host::PLUGIN.name()])
            .args(["--max-concurrent", &max_concurrent.to_string()])
            .arg("--state-dir")
            .arg(&state_dir)
            .args(["--listen", &admin.to_string()])
            // The token in the environment, never in argv; no settings
            // file of whoever runs the bench.
            .env(orchestrator::settings::TOKEN_ENV, emu.account_token())
            .env("GARRISON_CONFIG", &config_dir)
            .env_remove("GARRISON_CONFIG_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("starting garrison serve")?;
        let pid = child.id().context("garrison exited at once")?;
        Ok(Garrison {
            child,
            pid,
            admin,
            state_dir,
            log,
        })
    }

    pub(super) async fn wait_ready(&mut self, http: &reqwest::Client) -> anyhow::Result<()> {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            self.check_alive()?;
            let ready = http
                .get(format!("http://{}/readyz", self.admin))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("garrison serve was not ready within {HANG_GUARD:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(super) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Garrison's state store, read beside it.
    pub(super) fn store(&self) -> anyhow::Result<Store> {
        Store::open_existing(&orchestrator::db_path(&self.state_dir))
    }

    pub(super) fn usage(&mut self) -> anyhow::Result<proc::Usage> {
        self.check_alive()?;
        proc::usage(self.pid).context("reading garrison's /proc entry")
    }

    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "garrison serve exited ({status}); its log: {}",
                self.log.display()
            );
        }
        Ok(())
    }

    /// Stops Garrison as a service manager would, then stops whatever
    /// remote a failed run left behind.
    pub(super) async fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        kill_leftovers(&self.state_dir);
    }
}

/// Kills the process group of every remote still alive under `dir` (the
/// host backend's `child.pid` files); a bench that failed halfway must not
/// leave a thousand remotes behind.
pub(crate) fn kill_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            kill_leftovers(&path);
        } else if entry.file_name() == ::shim::CHILD_PID_FILE
            && let Ok(record) = std::fs::read_to_string(&path)
            && ::shim::is_alive(&record)
            && let Some(pid) = record
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn free_loopback_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}
