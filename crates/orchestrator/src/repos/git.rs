//! Running git on Garrison's side: the environment given and nothing else
//! (neither the machine's nor the user's git configuration), a bounded
//! time, and only the tail of git's words kept.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, anyhow};

/// A clone or fetch that takes longer than this is stopped and the start
/// fails.
pub(super) const GIT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Runs `argv` (git first) in `cwd` with `env` as its whole environment
/// plus the two variables that keep git's own configuration files out;
/// returns its status and its output (stdout, then stderr).
pub(super) async fn run_git(
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    what: &str,
) -> anyhow::Result<(ExitStatus, Vec<u8>)> {
    let child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running git on this host (is git installed?)")?;
    // git's messages are the repository host's words: only their tail is
    // kept (`bounded_output`).
    let out = tokio::time::timeout(
        GIT_TIMEOUT,
        sandbox::bounded_output::wait_with_output(child),
    )
    .await
    .map_err(|_| anyhow!("{what} did not finish within {GIT_TIMEOUT:?}"))??;
    let mut output = out.stdout;
    output.extend_from_slice(out.stderr.bytes());
    Ok((out.status, output))
}
