//! Helpers shared by the simulator's integration tests: scratch directories,
//! a way to start the simulator binary with the spawn-contract environment,
//! and a bound on every wait so a broken build fails instead of hanging.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

/// The simulator under test: the one cargo just built for this test run,
/// or the static release build when `scripts/test` points
/// `GARRISON_REMOTE_SIM` at it, so the binary that ships into sandboxes is
/// the one tested.
pub(crate) fn bin() -> String {
    std::env::var("GARRISON_REMOTE_SIM")
        .ok()
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_devin-remote-sim").to_string())
}

/// Generous: only there so a hung simulator fails the test instead of
/// hanging the suite. Nothing asserts on how long anything takes.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

pub(crate) async fn patiently<F: std::future::Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(PATIENCE, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "remote-sim-test-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A simulator process started the way an orchestrator would: in its
/// working directory, with a clean environment holding the contract's
/// variables and little else.
pub(crate) struct Sim {
    child: Child,
    pub workdir: PathBuf,
    pub state_dir: PathBuf,
    _scratch: Scratch,
}

pub(crate) struct SimEnv<'a> {
    pub gateway_url: &'a str,
    pub token: &'a str,
    pub session_id: &'a str,
    /// Extra variables, e.g. a short connect budget.
    pub extra: &'a [(&'a str, &'a str)],
}

impl Sim {
    pub(crate) fn start(env: SimEnv<'_>) -> Sim {
        let scratch = Scratch::new("sim");
        let workdir = scratch.path().join("work");
        let state_dir = scratch.path().join("state");
        std::fs::create_dir_all(&workdir).unwrap();
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .current_dir(&workdir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", scratch.path())
            .env("DEVIN_OUTPOST_GATEWAY_URL", env.gateway_url)
            .env("DEVIN_OUTPOST_CONNECT_TOKEN", env.token)
            .env("DEVIN_OUTPOST_SESSION_ID", env.session_id)
            .env("DEVIN_REMOTE_STATE_DIR", &state_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in env.extra {
            cmd.env(name, value);
        }
        Sim {
            child: cmd.spawn().expect("start the simulator"),
            workdir,
            state_dir,
            _scratch: scratch,
        }
    }

    /// Waits for the simulator to exit; returns its exit code and stderr.
    /// The scratch directories stay until the `Sim` is dropped, so the test
    /// can inspect them afterwards.
    pub(crate) async fn finish(&mut self) -> (i32, String) {
        let mut stderr = self.child.stderr.take().expect("stderr is piped");
        let mut text = String::new();
        let (status, read) = patiently("the simulator to exit", async {
            tokio::join!(self.child.wait(), stderr.read_to_string(&mut text))
        })
        .await;
        read.unwrap();
        let code = status
            .unwrap()
            .code()
            .unwrap_or_else(|| panic!("simulator killed by a signal; stderr:\n{text}"));
        (code, text)
    }
}

/// Runs the binary with exactly these environment variables and arguments.
pub(crate) async fn run(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let output = patiently(
        "the simulator to exit",
        Command::new(bin())
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .unwrap();
    (
        output.status.code().expect("exit code"),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
