//! Running the real `garrison` binary as a one-shot command in a clean
//! environment whose configuration directory is a temporary one.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// Bounds every wait; a healthy run takes a small fraction of it.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(120);

/// A throw-away home with `GARRISON_CONFIG` under it.
pub(crate) struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub(crate) fn new() -> Home {
        Home {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// `$GARRISON_CONFIG` of commands started from this home.
    pub(crate) fn config_dir(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    pub(crate) fn credentials_path(&self) -> PathBuf {
        self.config_dir().join("credentials.json")
    }

    /// `garrison ARGS` with only PATH, HOME, USER, GARRISON_CONFIG and
    /// `extra_env` set; killed if dropped while running.
    pub(crate) fn command(
        &self,
        args: &[&str],
        extra_env: &[(&str, &str)],
    ) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_garrison"));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("USER", "garrison-test")
            .env("GARRISON_CONFIG", self.config_dir())
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs to completion, with `stdin` written to its standard input.
    pub(crate) async fn run(
        &self,
        args: &[&str],
        extra_env: &[(&str, &str)],
        stdin: Option<&str>,
    ) -> Ran {
        let mut cmd = self.command(args, extra_env);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().expect("garrison starts");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(input.as_bytes()).await.unwrap();
            drop(pipe);
        }
        let output = tokio::time::timeout(HANG_GUARD, child.wait_with_output())
            .await
            .expect("garrison finishes")
            .unwrap();
        Ran::from(output)
    }
}

/// What a finished command did.
#[derive(Debug)]
pub(crate) struct Ran {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Ran {
    fn from(o: Output) -> Ran {
        Ran {
            success: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Ran {
    pub(crate) fn ok(self) -> Ran {
        assert!(self.success, "garrison failed:\n{self:#?}");
        self
    }

    pub(crate) fn failed(self) -> Ran {
        assert!(!self.success, "garrison should have failed:\n{self:#?}");
        self
    }

    pub(crate) fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

pub(crate) fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}
