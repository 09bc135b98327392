//! Reaping what runc leaves behind.
//!
//! `runc run --detach` and `runc exec --detach` exit once the container's
//! init, or the process started in it, runs; the kernel hands that process
//! to the nearest subreaper above runc, else to the machine's init. A
//! container's init cannot finish dying until every process of its pid
//! namespace has been reaped (the kernel waits in `zap_pid_ns_processes`),
//! and runc deletes a container only once its init has died. So a destroy
//! took as long as the machine's init took to reap, twice over (the
//! processes started in the container, then its init): about 2 s on a
//! machine whose init reaps on a timer.
//!
//! Garrison is therefore the subreaper of the processes its runc calls
//! leave behind, and one thread reaps each of them, through a pidfd, the
//! moment it ends. Only processes handed to [`adopt`] are reaped: the rest
//! of Garrison's children belong to whoever spawned them (tokio waits for
//! its own by pid). A process started by an earlier Garrison belongs to the
//! machine's init, as before.
//!
//! Being a subreaper applies to every descendant: a process that a tool
//! Garrison runs leaves behind (a daemon forking away from it) becomes
//! Garrison's child and stays a zombie until Garrison exits. Garrison runs
//! no such tool on a session's path; Podman's `conmon`, in `garrison bench
//! sandbox --peer podman`, is one.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};

use anyhow::Context;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

struct Reaper {
    adopted: Mutex<Sender<OwnedFd>>,
    /// Written to after each adoption, so the thread polls the new pidfd.
    wake: OwnedFd,
}

static REAPER: OnceLock<Result<Reaper, String>> = OnceLock::new();

/// Makes this process the subreaper of its descendants and starts the
/// reaping thread; later calls only report how the first one went.
pub fn start() -> anyhow::Result<()> {
    REAPER
        .get_or_init(|| start_reaper().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map(drop)
        .map_err(|e| anyhow::anyhow!("becoming the subreaper of runc's processes: {e}"))
}

fn start_reaper() -> anyhow::Result<Reaper> {
    nix::sys::prctl::set_child_subreaper(true).context("prctl(PR_SET_CHILD_SUBREAPER)")?;
    let (wake_rx, wake_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (tx, rx) = channel::<OwnedFd>();
    std::thread::Builder::new()
        .name("garrison-reaper".into())
        .spawn(move || reap_forever(wake_rx, rx))
        .context("starting the reaping thread")?;
    Ok(Reaper {
        adopted: Mutex::new(tx),
        wake: wake_tx,
    })
}

/// Reaps `pid` as soon as it ends, if it is this process's child (a process
/// runc left behind, adopted as its subreaper). Anything else is left to
/// its parent.
pub fn adopt(pid: u32) {
    let Some(Ok(reaper)) = REAPER.get() else {
        return;
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return;
    };
    if parent_of(&stat) != Some(std::process::id()) {
        return;
    }
    // Our child cannot be reaped by anyone else, so the pid still names it.
    let Some(pidfd) = pidfd_open(pid) else {
        return;
    };
    if let Ok(adopted) = reaper.adopted.lock()
        && adopted.send(pidfd).is_ok()
    {
        let _ = nix::unistd::write(&reaper.wake, &[1]);
    }
}

/// The parent pid in the text of `/proc/<pid>/stat`: the second field after
/// the command name, which is in parentheses and may hold anything.
fn parent_of(stat: &str) -> Option<u32> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// A pidfd of `pid`, which becomes readable when it dies, whoever its
/// parent is.
pub fn pidfd(pid: u32) -> Option<OwnedFd> {
    pidfd_open(pid)
}

/// Waits until the process behind `pidfd` has died (a zombie counts), at
/// most `limit`; whether it has.
pub fn wait_exit(pidfd: &OwnedFd, limit: std::time::Duration) -> bool {
    let timeout = PollTimeout::try_from(limit).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the fd was just opened and is owned by nothing else.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Reaps the process behind `pidfd` if it has ended; true once it is no
/// longer ours to wait for (reaped now, or by someone else).
pub fn reap(pidfd: &OwnedFd) -> bool {
    // SAFETY: an all-zero siginfo_t is valid; waitid fills it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on a pidfd we own, WNOHANG: never blocks.
    let rc = unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG,
        )
    };
    // SAFETY: si_pid is set by a successful waitid (0 when nothing ended).
    rc != 0 || unsafe { info.si_pid() } != 0
}

fn reap_forever(wake: OwnedFd, adopted: std::sync::mpsc::Receiver<OwnedFd>) {
    let mut pidfds: Vec<OwnedFd> = Vec::new();
    loop {
        let ready: Vec<bool> = {
            let mut fds = vec![PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
            fds.extend(
                pidfds
                    .iter()
                    .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN)),
            );
            if poll(&mut fds, PollTimeout::NONE).is_err() {
                continue;
            }
            fds.iter()
                .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        if ready[0] {
            let mut buf = [0u8; 64];
            let _ = nix::unistd::read(&wake, &mut buf);
            pidfds.extend(adopted.try_iter());
        }
        let mut index = 0;
        pidfds.retain(|fd| {
            index += 1;
            !(ready.get(index).copied().unwrap_or(false) && reap(fd))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_name_that_looks_like_fields() {
        assert_eq!(parent_of("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parent_of("42 (a) S 1 (b) S 9) R 13 1 1"), Some(13));
        assert_eq!(parent_of("42 (sh"), None);
        assert_eq!(parent_of(""), None);
    }
}
