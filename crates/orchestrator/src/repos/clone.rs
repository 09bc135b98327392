//! Running one clone in the sandbox: the `git clone` process and the
//! read-back of the clone's configuration, each bounded in time, with the
//! output copied into the session log and quoted (scrubbed, from its end)
//! in the error when the clone fails.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail};
use sandbox::{Handle, ProcessRef, ProcessSpec, ProcessStatus, Sandbox};

use super::PlannedClone;
use super::credentials::{check_config, clone_argv, clone_env};
use crate::session_log::SessionLogs;
use crate::settings::Repos;

/// A clone that takes longer than this is stopped and the start fails.
const CLONE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const POLL: Duration = Duration::from_millis(100);
const OUTPUT_CHUNK: usize = 256 * 1024;
/// Output quoted in an error, from its end.
const ERROR_OUTPUT: usize = 2000;

/// Clones one repository into `clone.dir` (`repos/<name>`) under the
/// sandbox's workdir, the directory the remote is started in (git makes
/// `repos/` itself): spawns `clone-<n>`,
/// waits for it, copies its output into the session log, then reads the
/// clone's `.git/config` back (process `clone-<n>-check`) and refuses a
/// credential helper or the token in it.
pub async fn clone_one(
    backend: &dyn Sandbox,
    handle: &Handle,
    n: usize,
    clone: &PlannedClone,
    repos: &Repos,
    logs: &SessionLogs,
    session_id: &str,
) -> anyhow::Result<()> {
    let name = format!("clone-{n}");
    let spec = ProcessSpec {
        name: name.clone(),
        argv: clone_argv(clone, repos.git_token.is_some()),
        env: clone_env(repos, &handle.home),
        cwd: handle.workdir.clone(),
    };
    let (status, output) = run(backend, handle, &spec).await?;
    let _ = logs.remote_output(session_id, &output);
    if status != ProcessStatus::Exited(0) {
        let text = String::from_utf8_lossy(&output);
        let tail = tail_of(text.trim(), ERROR_OUTPUT);
        // The caller scrubs the message; the output is scrubbed here too, so
        // the error is safe wherever it goes.
        let tail = logs.redactor().scrub(tail);
        bail!(
            "cloning {} into {} failed ({}): {tail}",
            clone.url,
            clone.dir,
            describe(status)
        );
    }

    let config = format!("{}/.git/config", clone.dir);
    let check = ProcessSpec {
        name: format!("{name}-check"),
        argv: vec!["cat".into(), "--".into(), config.clone()],
        env: BTreeMap::from([("PATH".to_owned(), crate::contract::PATH.to_owned())]),
        cwd: handle.workdir.clone(),
    };
    let (status, output) = run(backend, handle, &check).await?;
    if status != ProcessStatus::Exited(0) {
        bail!(
            "reading {config} after cloning failed ({})",
            describe(status)
        );
    }
    check_config(&String::from_utf8_lossy(&output), repos)
        .map_err(|reason| anyhow!("{config} after cloning {}: {reason}", clone.url))
}

/// Spawns `spec`, waits for it (at most [`CLONE_TIMEOUT`]) and returns its
/// status and whole output.
async fn run(
    backend: &dyn Sandbox,
    handle: &Handle,
    spec: &ProcessSpec,
) -> anyhow::Result<(ProcessStatus, Vec<u8>)> {
    let process: ProcessRef = backend
        .spawn(handle, spec)
        .await
        .map_err(|e| anyhow!(e).context(format!("starting {}", spec.name)))?;
    let status = match tokio::time::timeout(
        CLONE_TIMEOUT,
        sandbox::wait_exit(backend, handle, &process, POLL),
    )
    .await
    {
        Ok(status) => {
            status.map_err(|e| anyhow!(e).context(format!("waiting for {}", spec.name)))?
        }
        Err(_) => {
            let _ = backend.kill(handle, &process, Duration::from_secs(5)).await;
            bail!("{} did not finish within {CLONE_TIMEOUT:?}", spec.name);
        }
    };
    let mut output = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = backend
            .read_output(handle, &process, offset, OUTPUT_CHUNK)
            .await
            .map_err(|e| anyhow!(e).context(format!("reading the output of {}", spec.name)))?;
        if chunk.data.is_empty() {
            break;
        }
        output.extend_from_slice(&chunk.data);
        offset = chunk.next_offset;
    }
    Ok((status, output))
}

fn describe(status: ProcessStatus) -> String {
    match status {
        ProcessStatus::Exited(code) => format!("exit code {code}"),
        ProcessStatus::Lost => "the process was lost".into(),
        ProcessStatus::Running => "still running".into(),
    }
}

/// At most the last `max` bytes of `text`, on a character boundary.
fn tail_of(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
