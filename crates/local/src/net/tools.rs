//! The external programs networking is built from, and running them.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::anyhow;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use sandbox::{Result, SandboxError};

/// Paths of the programs used, found once per call that needs them.
#[derive(Clone, Debug)]
pub(crate) struct Tools {
    pub nft: PathBuf,
    pub ip: PathBuf,
}

impl Tools {
    pub(super) fn find() -> Result<Self> {
        Ok(Self {
            nft: find("nft", "nftables")?,
            ip: find("ip", "iproute2")?,
        })
    }
}

/// Looks on `PATH`, then in `/usr/sbin` and `/usr/bin` (root's `PATH` under
/// some service managers lacks the sbin directories).
fn find(program: &str, package: &str) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| {
            SandboxError::Fatal(anyhow!(
                "{program} not found: apt-get install {package} (needed by the local backend's networking)"
            ))
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Creating namespaces and firewall rules needs root; say so up front
/// instead of failing on the first `ip netns add`.
pub(crate) fn require_root() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(SandboxError::Fatal(anyhow!(
            "the local backend's networking needs root (network namespaces, nftables)"
        )))
    }
}

/// Runs `program args…` to completion, feeding it `stdin`, optionally inside
/// the network namespace `netns` (joined in the child between fork and
/// exec, so no other thread of Garrison ever changes namespace). A non-zero
/// exit is `Transient` carrying its stderr: the callers' failures are races
/// with a concurrent destroy or a busy kernel, not bad input (which is
/// typed and cannot be wrong).
pub(crate) async fn run<I, S>(
    program: &Path,
    args: I,
    netns: Option<&Path>,
    stdin: Option<&str>,
) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let described = format!(
        "{} {:?}",
        program.display(),
        cmd.as_std().get_args().collect::<Vec<_>>()
    );
    if let Some(netns) = netns {
        let fd: OwnedFd = std::fs::File::open(netns)
            .map_err(|e| {
                SandboxError::Transient(anyhow!(
                    "opening network namespace {}: {e}",
                    netns.display()
                ))
            })?
            .into();
        // SAFETY: setns is a single async-signal-safe system call; the fd
        // stays open in the parent until spawn returns.
        unsafe {
            cmd.as_std_mut().pre_exec(move || {
                if libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| SandboxError::Fatal(anyhow!("starting {described}: {e}")))?;
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(input.as_bytes())
            .await
            .map_err(|e| SandboxError::Transient(anyhow!("writing to {described}: {e}")))?;
        drop(pipe);
    }
    let out = sandbox::bounded_output::wait_with_output(child)
        .await
        .map_err(|e| SandboxError::Transient(anyhow!("waiting for {described}: {e}")))?;
    if !out.status.success() {
        return Err(SandboxError::Transient(anyhow!(
            "{described} failed ({}): {}",
            out.status,
            out.stderr_text()
        )));
    }
    if out.stdout_cut > 0 {
        return Err(SandboxError::Transient(anyhow!(
            "{described} wrote more than {} bytes of output",
            sandbox::bounded_output::STDOUT_MAX
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
