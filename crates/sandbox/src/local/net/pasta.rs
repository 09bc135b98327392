//! pasta: the per-sandbox process that gives a namespace its egress.
//!
//! pasta (from the `passt` package) owns a tap device inside the namespace
//! and turns the namespace's packets into ordinary sockets on the host, so
//! the host needs no bridge, no NAT rule and no `ip_forward`. It copies the
//! host's addresses and default routes into the namespace, and maps the
//! namespace's gateway addresses onto the host's loopback, every port of
//! it: the nftables rules (see `rules`) close all of it but the gateway.
//!
//! pasta daemonizes (its own session, stdio on /dev/null) and writes its pid
//! to a file, so it outlives Garrison; [`stop`] finds it again through that
//! file after a restart.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::tools::{self, Tools};
use crate::{Result, SandboxError};

/// How long pasta may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Starts pasta for the namespace at `netns_path` and returns its pid.
///
/// `--runas 0`: started as root, pasta otherwise switches to `nobody` and
/// then fails with "Couldn't switch to pasta namespaces". `-t none -u none`: no port
/// of the host is forwarded into the sandbox (nothing dials in);
/// `-T none -U none`: no port of the namespace's loopback is forwarded to
/// the host's loopback (pasta's default would bridge the two loopbacks).
/// `--config-net`: pasta itself sets the address and routes, so the
/// namespace is usable as soon as pasta has forked, with no DHCP client.
pub(crate) async fn start(tools: &Tools, netns_path: &Path, pid_file: &Path) -> Result<u32> {
    let _ = std::fs::remove_file(pid_file);
    let mut args: Vec<std::ffi::OsString> = [
        "--config-net",
        "--runas",
        "0",
        "-t",
        "none",
        "-u",
        "none",
        "-T",
        "none",
        "-U",
        "none",
        "--quiet",
    ]
    .iter()
    .map(Into::into)
    .collect();
    args.extend(["--pid".into(), pid_file.as_os_str().to_owned()]);
    args.extend(["--netns".into(), netns_path.as_os_str().to_owned()]);
    // The foreground pasta exits once the daemon is running and the
    // namespace is configured; its failures land in its stderr.
    tools::run(&tools.pasta, &args, None, None)
        .await
        .map_err(|e| match e {
            SandboxError::Transient(e) => SandboxError::Transient(e.context("starting pasta")),
            other => other,
        })?;
    read_pid(pid_file)?.ok_or_else(|| {
        SandboxError::Transient(anyhow!(
            "pasta started but wrote no pid to {}",
            pid_file.display()
        ))
    })
}

/// The pid in `pid_file`, `None` when there is no such file.
pub(crate) fn read_pid(pid_file: &Path) -> Result<Option<u32>> {
    match std::fs::read_to_string(pid_file) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            SandboxError::Transient(anyhow!("bad pid in {}: {text:?}", pid_file.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SandboxError::Transient(anyhow!(
            "reading {}: {e}",
            pid_file.display()
        ))),
    }
}

/// Whether `pid` is a pasta serving `netns_path` (and not an unrelated
/// process that reused the pid after pasta died).
pub(crate) fn is_ours(pid: u32, netns_path: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut args = cmdline.split(|&b| b == 0);
    let Some(argv0) = args.next() else {
        return false;
    };
    let argv0 = String::from_utf8_lossy(argv0);
    let is_pasta = argv0.contains("pasta") || argv0.contains("passt");
    let netns = netns_path.as_os_str().as_encoded_bytes();
    is_pasta && args.any(|a| a == netns)
}

/// Whether `pid` exists and has not exited (a zombie has).
fn is_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesized command name, which may itself
    // contain spaces and parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// Every pasta serving `netns_path`: the one in the pid file, and any other
/// (a pid file lost in a crash, or a pasta from a create that failed before
/// it was recorded), found by scanning `/proc`.
fn find(pid_file: &Path, netns_path: &Path) -> Result<Vec<u32>> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map_err(|e| SandboxError::Transient(anyhow!("reading /proc: {e}")))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| is_ours(pid, netns_path))
        .collect();
    if let Some(pid) = read_pid(pid_file)?
        && is_ours(pid, netns_path)
        && !pids.contains(&pid)
    {
        pids.push(pid);
    }
    Ok(pids)
}

/// Stops every pasta serving `netns_path` and waits until they have exited;
/// none running is success.
pub(crate) async fn stop(pid_file: &Path, netns_path: &Path) -> Result<()> {
    let pids = find(pid_file, netns_path)?;
    for &pid in &pids {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    let mut killed = false;
    // Not our children (pasta daemonizes), so no waitpid: watch /proc.
    while let Some(&pid) = pids.iter().find(|&&pid| is_running(pid)) {
        if Instant::now() >= deadline && !killed {
            for &pid in &pids {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            killed = true;
        }
        if Instant::now() >= deadline + STOP_GRACE {
            return Err(SandboxError::Transient(anyhow!(
                "pasta (pid {pid}) survived SIGKILL"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Resident memory of `pid` in KiB (`VmRSS`), for reports and tests.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
