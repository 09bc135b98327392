//! Cloning one repository for a sandbox, on Garrison's side: the token
//! never enters the sandbox (not a process environment, not a spawn
//! request file, not the agent's memory). The host's mirror of the
//! repository is brought up to date with the credentials in git's own
//! environment (`mirror.rs`), the session's clone is made from the mirror
//! and pointed back at the repository's URL, its configuration is read
//! back and refused if it holds a helper or the token, and the clone goes
//! into the sandbox as a tar stream in bounded parts, unpacked there by
//! `tar`. Each step is bounded in time; git's output is copied into the
//! session log and quoted (scrubbed, from its end) in the error when the
//! clone fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use sandbox::{Handle, ProcessRef, ProcessSpec, ProcessStatus, Sandbox};
use tokio::io::AsyncReadExt;

use super::credentials::{check_config, clone_env};
use super::git::{GIT_TIMEOUT as CLONE_TIMEOUT, run_git};
use super::mirror::{MirrorUse, Mirrors};
use super::plan::PlannedClone;
use super::plan::Repos;
use crate::session_log::SessionLogs;
const POLL: Duration = Duration::from_millis(100);
const OUTPUT_CHUNK: usize = 256 * 1024;
/// Output quoted in an error, from its end.
const ERROR_OUTPUT: usize = 2000;
/// The clone goes into the sandbox in files of at most this size, so
/// Garrison never holds a whole repository in memory.
const PART_BYTES: usize = 16 << 20;
/// A clone's configuration is small; more is refused.
const MAX_CONFIG: u64 = 1 << 20;

/// The sandbox a clone goes into and the session it is for.
pub(crate) struct CloneInto<'a> {
    pub backend: &'a dyn Sandbox,
    pub handle: &'a Handle,
    pub logs: &'a SessionLogs,
    pub session_id: &'a str,
}

/// Clones one repository into `clone.dir` (`<name>`) under the
/// sandbox's workdir, the directory the remote is started in; says how
/// the host's mirror of it was found.
pub(crate) async fn clone_one(
    into: &CloneInto<'_>,
    n: usize,
    clone: &PlannedClone,
    repos: &Repos,
    mirrors: &Mirrors,
) -> anyhow::Result<MirrorUse> {
    let CloneInto {
        backend,
        handle,
        logs,
        session_id,
    } = *into;
    let scratch = Scratch::new(logs.dir(session_id).join(format!("clone-{n}")))?;
    let (ok, output, how) = clone_on_host(scratch.path(), clone, repos, mirrors).await?;
    let _ = logs.remote_output(session_id, &output);
    if !ok.success() {
        let text = String::from_utf8_lossy(&output);
        let tail = tail_of(text.trim(), ERROR_OUTPUT);
        // The caller scrubs the message; the output is scrubbed here too, so
        // the error is safe wherever it goes.
        let tail = logs.redactor().scrub(tail);
        bail!(
            "cloning {} into {} failed ({ok}): {tail}",
            clone.url,
            clone.dir
        );
    }
    let config_path = scratch.path().join(&clone.dir).join(".git/config");
    let mut config = String::new();
    std::fs::File::open(&config_path)
        .and_then(|f| {
            std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_CONFIG), &mut config)
        })
        .with_context(|| format!("reading {}/.git/config after cloning", clone.dir))?;
    check_config(&config, repos).map_err(|reason| {
        anyhow!(
            "{}/.git/config after cloning {}: {reason}",
            clone.dir,
            clone.url
        )
    })?;

    let parts = upload(backend, handle, n, scratch.path(), &clone.dir).await?;
    let unpack = ProcessSpec {
        name: format!("clone-{n}-unpack"),
        argv: unpack_argv(&parts),
        env: BTreeMap::from([("PATH".to_owned(), crate::contract::PATH.to_owned())]),
        cwd: handle.workdir.clone(),
    };
    let (status, output) = run_to_end(backend, handle, &unpack).await?;
    if status != ProcessStatus::Exited(0) {
        let text = String::from_utf8_lossy(&output);
        bail!(
            "unpacking the clone of {} into {} in the sandbox failed ({}): {}",
            clone.url,
            clone.dir,
            describe(status),
            tail_of(text.trim(), ERROR_OUTPUT)
        );
    }
    Ok(how)
}

/// The session's clone, made here in `scratch` from the host's mirror
/// (brought up to date first, with the credentials in git's environment
/// only), then pointed at the repository's URL as a direct clone would be.
/// git's status and words are those of the first step that failed, or of
/// the last.
async fn clone_on_host(
    scratch: &Path,
    clone: &PlannedClone,
    repos: &Repos,
    mirrors: &Mirrors,
) -> anyhow::Result<(ExitStatus, Vec<u8>, MirrorUse)> {
    let lease = match mirrors.lease(&clone.url, repos).await? {
        Ok(lease) => lease,
        Err(failed) => return Ok((failed.status, failed.output, MirrorUse::Cloned)),
    };
    let home = scratch.join("home");
    std::fs::create_dir_all(&home)?;
    // The mirror is local and public to this host: no credentials.
    let env = clone_env(&Repos::default(), &home.display().to_string());
    let how = lease.how;
    let mirror = lease.path.display().to_string();
    let argv = ["git", "clone", "--quiet", "--", &mirror, &clone.dir].map(str::to_owned);
    let what = format!("git clone of {}", clone.url);
    let (status, output) = run_git(&argv, &env, scratch, &what).await?;
    drop(lease);
    if !status.success() {
        return Ok((status, output, how));
    }
    let argv = ["git", "remote", "set-url", "origin", &clone.url].map(str::to_owned);
    let (status, more) = run_git(&argv, &env, &scratch.join(&clone.dir), &what).await?;
    let mut output = output;
    output.extend_from_slice(&more);
    Ok((status, output, how))
}

/// Streams `dir` (relative to `root`) as a tar archive into the sandbox,
/// [`PART_BYTES`] at a time; returns the parts' paths there, in order.
async fn upload(
    backend: &dyn Sandbox,
    handle: &Handle,
    n: usize,
    root: &Path,
    dir: &str,
) -> anyhow::Result<Vec<String>> {
    let mut tar = tokio::process::Command::new("tar")
        .args(["--numeric-owner", "-C"])
        .arg(root)
        .args(["-cf", "-", "--", dir])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running tar on this host")?;
    let mut stdout = tar.stdout.take().context("tar stdout")?;
    let mut parts = Vec::new();
    loop {
        let mut part = Vec::with_capacity(PART_BYTES);
        (&mut stdout)
            .take(PART_BYTES as u64)
            .read_to_end(&mut part)
            .await
            .context("reading the clone's archive")?;
        if part.is_empty() {
            break;
        }
        let path = format!(
            "{}/.garrison-clone-{n}.part{:05}",
            handle.workdir,
            parts.len()
        );
        backend
            .put_file(handle, &path, &part, 0o600)
            .await
            .map_err(|e| anyhow!(e).context("copying the clone into the sandbox"))?;
        parts.push(path);
    }
    let done = sandbox::bounded_output::wait_with_output(tar).await?;
    if !done.status.success() {
        bail!("packing the clone failed: {}", done.stderr_text());
    }
    Ok(parts)
}

/// Unpacks the parts in order where the process runs, then removes them.
fn unpack_argv(parts: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = [
        "/bin/sh",
        "-c",
        "cat -- \"$@\" | tar -x --no-same-owner -f -; status=$?; rm -f -- \"$@\"; exit $status",
        "unpack",
    ]
    .map(str::to_owned)
    .to_vec();
    argv.extend(parts.iter().cloned());
    argv
}

/// A host directory for one clone, removed when dropped (the clone holds no
/// secret, but it is the session's code and must not linger).
struct Scratch(PathBuf);

impl Scratch {
    fn new(path: PathBuf) -> anyhow::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Spawns `spec`, waits for it (at most [`CLONE_TIMEOUT`]) and returns its
/// status and whole output.
pub(crate) async fn run_to_end(
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
    while output.len() < OUTPUT_CHUNK * 4 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_are_unpacked_in_order_then_removed() {
        let argv = unpack_argv(&["/w/a.part00000".into(), "/w/a.part00001".into()]);
        assert_eq!(argv[0], "/bin/sh");
        assert!(argv[2].contains("tar -x --no-same-owner"));
        assert!(argv[2].contains("rm -f"));
        assert_eq!(argv[4..], ["/w/a.part00000", "/w/a.part00001"]);
    }

    #[test]
    fn tails_end_on_character_boundaries() {
        assert_eq!(tail_of("abcdef", 3), "def");
        assert_eq!(tail_of("aé", 1), "");
        assert_eq!(tail_of("ab", 5), "ab");
    }
}
