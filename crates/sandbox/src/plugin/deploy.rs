//! The deploy capability of a plug-in: `garrison deploy <backend>` runs
//! Garrison itself in a long-lived, named sandbox of that backend's cloud.
//!
//! The CLI parses the options (one set for every target, described by
//! [`DeployHelp`]), resolves the serve settings and prints; the backend
//! finds, creates or resumes its sandbox and starts the deployed serve in
//! it ([`Deployment`]). What the backend says goes through a
//! [`DeployOutput`], so the CLI decides where each line is written.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::Context;
use async_trait::async_trait;

/// What the CLI needs to offer `garrison deploy <backend>` before any
/// setting is read: its help texts, the bounds of its options, and the
/// rules of its deployment names.
pub trait DeployTarget: Sync {
    /// The texts and option bounds of the subcommand.
    fn help(&self) -> &'static DeployHelp;

    /// Whether `name` is a valid deployment name here; the error is the
    /// message for `--name`.
    fn check_name(&self, name: &str) -> Result<(), String>;
}

/// The help of `garrison deploy <backend>` and its options (the options
/// are the same for every target; their wording is the backend's).
#[derive(Debug)]
pub struct DeployHelp {
    /// The subcommand's one-line description.
    pub about: &'static str,
    /// Examples, credentials, settings and keep-alive, after the options.
    pub after_help: &'static str,
    /// The default deployment name.
    pub default_name: &'static str,
    /// Help of `--name`.
    pub name: &'static str,
    /// Help of `--image`.
    pub image: &'static str,
    /// Help of `--disk-mb`; `None`: the target has no such option.
    pub disk_mb: Option<&'static str>,
    /// Whether `--memory-mb` is bounded to 32 bits.
    pub memory_mb_u32: bool,
    /// Help of `--timeout-secs`.
    pub timeout_secs: &'static str,
    /// Bounds of `--timeout-secs` (then a 32-bit value); `None`: any
    /// 64-bit value.
    pub timeout_range: Option<(u32, u32)>,
    /// Help of `--status`.
    pub status: &'static str,
    /// Help of `--follow`.
    pub follow: &'static str,
    /// Help of `--terminate`.
    pub terminate: &'static str,
}

/// What a deploy needs, from the options and the settings the deployed
/// serve will resolve.
#[derive(Clone, Debug)]
pub struct DeployRequest {
    /// The deployment's name (checked by [`DeployTarget::check_name`]).
    pub name: String,
    /// `--image`, if given.
    pub image: Option<String>,
    /// vCPUs of the orchestrator's sandbox.
    pub cpus: f64,
    /// Its memory, MiB.
    pub memory_mb: u64,
    /// Its disk, MiB, where the target offers `--disk-mb`.
    pub disk_mb: Option<u64>,
    /// Its idle window or lifetime, as the target reads it.
    pub timeout_secs: u64,
    /// The binary to copy in (`None`: the running one).
    pub binary: Option<PathBuf>,
    /// The settings file to copy in.
    pub config_file: Option<Vec<u8>>,
    /// `garrison serve` options for the deployed serve.
    pub serve_args: Vec<String>,
    /// The deployed serve's environment as far as Devin and Garrison go
    /// (token, API URL, outposts, passed-through variables, `GIT_TOKEN`);
    /// the backend adds its own settings and paths.
    pub serve_env: BTreeMap<String, String>,
    /// The acceptor id the settings name, if one is configured.
    pub acceptor_id: Option<String>,
    /// The state directory the settings resolve to on this machine.
    pub state_dir: PathBuf,
}

/// Where a deploy's report goes.
pub trait DeployOutput: Send {
    /// A line of the command's report (stdout).
    fn say(&mut self, line: &str);
    /// A note about waiting or a change of sandbox (stderr).
    fn note(&mut self, line: &str);
    /// One line of the deployed serve's output.
    fn log_line(&mut self, line: &str) -> io::Result<()>;
    /// A chunk of the deployed serve's output, line ends included.
    fn log_text(&mut self, text: &[u8]) -> io::Result<()>;
}

/// A configured backend's deployments.
#[async_trait]
pub trait Deployment: Send + Sync {
    /// Finds, creates or resumes the deployment's sandbox and starts the
    /// deployed serve unless one runs. Idempotent: the keep-alive.
    async fn ensure(
        &self,
        request: &DeployRequest,
        out: &mut dyn DeployOutput,
    ) -> anyhow::Result<()>;

    /// Reports the sandbox and the serve; whether serve runs.
    async fn status(&self, name: &str, out: &mut dyn DeployOutput) -> anyhow::Result<bool>;

    /// The deployed serve's output; with `follow`, new output as it comes.
    async fn logs(
        &self,
        name: &str,
        follow: bool,
        out: &mut dyn DeployOutput,
    ) -> anyhow::Result<()>;

    /// Deletes the deployment.
    async fn terminate(&self, name: &str, out: &mut dyn DeployOutput) -> anyhow::Result<()>;
}

/// A line from a sandbox, without terminal control sequences.
pub fn printable(line: &str) -> String {
    line.chars()
        .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
        .collect()
}

/// `1d 02h 03m`, `4h 05m 06s`, `7m 08s` or `9s`: how status lines spell
/// an uptime or a time left.
pub fn uptime(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h:02}h {m:02}m")
    } else if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

/// The bytes of the binary to copy in: `path`, else the running one.
pub async fn read_binary(path: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    let binary = match path {
        Some(path) => path.to_owned(),
        None => std::env::current_exe().context("finding this garrison binary")?,
    };
    tokio::fs::read(&binary)
        .await
        .with_context(|| format!("reading {}", binary.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptimes() {
        assert_eq!(uptime(9_999), "9s");
        assert_eq!(uptime(68_000), "1m 08s");
        assert_eq!(uptime(3_600_000 * 4 + 306_000), "4h 05m 06s");
        assert_eq!(uptime(86_400_000 + 7_380_000), "1d 02h 03m");
        assert_eq!(uptime(-5), "0s");
    }
}
