//! Reaping what runc and runsc leave behind.
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
//! Garrison is therefore the subreaper of the processes its runtime calls
//! leave behind, and one thread reaps them. Two ways reach it:
//!
//! - processes handed to [`adopt`] (a container's init, runsc's gofer, the
//!   processes `exec --detach` started), reaped through a pidfd the moment
//!   they end;
//! - every other child that has ended and is a sandbox's: in a sandbox's
//!   cgroup (below [`SANDBOX_CGROUPS`]), or in the session of a process
//!   handed to [`adopt`] or [`remember_sessions`] (the cgroup of a process
//!   that dies after its sandbox's cgroup was removed reads as the root). [`sweep`] finds them
//!   on each `SIGCHLD`. Under runsc these are gVisor's own processes: the
//!   ptrace platform's stubs (one per address space in the sandbox, named
//!   `exe`, in the session of the sandbox's process) fall to Garrison when
//!   the Sentry dies, as it does when a fork bomb reaches the sandbox's
//!   task limit, hundreds at a time. Nothing else waits for them.
//!
//! Any other child is left alone: it is one that Garrison spawned (tokio
//! and `std::process` wait for their own by pid, and reaping it here would
//! steal its exit status), or one that a tool Garrison runs left behind (a
//! daemon forking away from it), which stays a zombie until Garrison
//! exits; Garrison runs no such tool on a session's path (Podman's
//! `conmon`, in `garrison bench sandbox --peer podman`, is one). Garrison
//! never spawns a child into a sandbox's cgroup: only the runtime puts
//! processes there (runsc joins it for a moment while it starts the
//! sandbox, and leaves before it exits). Nor into a sandbox's session: the
//! sessions recorded are those led by a sandbox's processes (the runtime
//! or gVisor made them with `setsid`), never Garrison's. A session's id
//! outlives its leader and may name a later session leader; the children
//! of Garrison that could lead one are a sandbox's (the same rule) or the
//! host backend's shim, whose exit status nobody waits for. A process
//! started by an earlier Garrison belongs to the machine's init, as
//! before.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};

use anyhow::Context;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// The cgroup (below each hierarchy's root) under which every sandbox's
/// cgroup is made (see `runc::cgroups_path`).
pub(crate) const SANDBOX_CGROUPS: &str = "/garrison";

/// Sessions of adopted processes kept for [`sweep`]: the most recent, far
/// more than the sandboxes a host runs at once.
const SESSIONS_KEPT: usize = 4096;

/// How often the thread sweeps even without a `SIGCHLD`: a backstop, should
/// code elsewhere in the process replace the signal's handler.
const SWEEP_BACKSTOP: std::time::Duration = std::time::Duration::from_secs(10);

struct Reaper {
    adopted: Mutex<Sender<OwnedFd>>,
    /// Written to after each adoption, so the thread polls the new pidfd,
    /// and on each `SIGCHLD`, so it sweeps. Non-blocking: a full pipe
    /// already wakes the thread.
    wake: OwnedFd,
    /// Sessions led by adopted processes, oldest first.
    sessions: Mutex<std::collections::VecDeque<u32>>,
}

static REAPER: OnceLock<Result<Reaper, String>> = OnceLock::new();

/// Makes this process the subreaper of its descendants and starts the
/// reaping thread; later calls only report how the first one went.
pub(crate) fn start() -> anyhow::Result<()> {
    REAPER
        .get_or_init(|| start_reaper().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map(drop)
        .map_err(|e| anyhow::anyhow!("becoming the subreaper of runc's processes: {e}"))
}

fn start_reaper() -> anyhow::Result<Reaper> {
    nix::sys::prctl::set_child_subreaper(true).context("prctl(PR_SET_CHILD_SUBREAPER)")?;
    let (wake_rx, wake_tx) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    let raw_wake = wake_tx.as_raw_fd();
    // SAFETY: the action only calls write(2), which is async-signal-safe, on
    // a non-blocking pipe that is never closed (the Reaper lives in a static
    // for the rest of the process). The registry chains to the handlers
    // others registered (tokio's, for its own children).
    unsafe {
        signal_hook_registry::register(libc::SIGCHLD, move || {
            let _ = libc::write(raw_wake, [1u8].as_ptr().cast(), 1);
        })
    }
    .context("handling SIGCHLD")?;
    let (tx, rx) = channel::<OwnedFd>();
    std::thread::Builder::new()
        .name("garrison-reaper".into())
        .spawn(move || reap_forever(wake_rx, rx))
        .context("starting the reaping thread")?;
    Ok(Reaper {
        adopted: Mutex::new(tx),
        wake: wake_tx,
        sessions: Mutex::default(),
    })
}

/// Reaps `pid` as soon as it ends, if it is this process's child (a process
/// runc left behind, adopted as its subreaper). Anything else is left to
/// its parent.
pub(crate) fn adopt(pid: u32) {
    let Some(Ok(reaper)) = REAPER.get() else {
        return;
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return;
    };
    if parent_of(&stat) != Some(std::process::id()) {
        return;
    }
    remember_session(reaper, pid, &stat);
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

/// Records the sessions led by `pids`, processes in a sandbox's cgroup (any
/// parent), so that [`sweep`] knows their members as the sandbox's after
/// its cgroup is gone. Under runsc the ptrace stubs are in the session of
/// the first stub, which is the Sentry's child, not Garrison's: a destroy
/// records it before the runtime removes the cgroup.
pub(crate) fn remember_sessions(pids: &[u32]) {
    let Some(Ok(reaper)) = REAPER.get() else {
        return;
    };
    for pid in pids {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            remember_session(reaper, *pid, &stat);
        }
    }
}

/// Records `pid`'s session if it leads one (`stat` is its
/// `/proc/<pid>/stat`): never Garrison's own, which Garrison does not lead
/// and whose members are Garrison's own children.
fn remember_session(reaper: &Reaper, pid: u32, stat: &str) {
    if session_of(stat) != Some(pid) {
        return;
    }
    if let Ok(mut sessions) = reaper.sessions.lock()
        && !sessions.contains(&pid)
    {
        if sessions.len() >= SESSIONS_KEPT {
            sessions.pop_front();
        }
        sessions.push_back(pid);
    }
}

/// The parent pid in the text of `/proc/<pid>/stat`: the second field after
/// the command name, which is in parentheses and may hold anything.
fn parent_of(stat: &str) -> Option<u32> {
    stat_field(stat, 1)?.parse().ok()
}

/// The session id in the text of `/proc/<pid>/stat`.
fn session_of(stat: &str) -> Option<u32> {
    stat_field(stat, 3)?.parse().ok()
}

/// Field `n` after the command name of a `/proc/<pid>/stat` text (0: the
/// state).
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(n)
}

/// A pidfd of `pid`, which becomes readable when it dies, whoever its
/// parent is.
pub(crate) fn pidfd(pid: u32) -> Option<OwnedFd> {
    pidfd_open(pid)
}

/// Waits until the process behind `pidfd` has died (a zombie counts), at
/// most `limit`; whether it has.
pub(crate) fn wait_exit(pidfd: &OwnedFd, limit: std::time::Duration) -> bool {
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
pub(crate) fn reap(pidfd: &OwnedFd) -> bool {
    waitid_pidfd(pidfd).unwrap_or(true)
}

/// Reaps the process behind `pidfd` if it has ended; whether it did.
fn reap_ended(pidfd: &OwnedFd) -> bool {
    waitid_pidfd(pidfd).unwrap_or(false)
}

/// waitid(2) without blocking on the process behind `pidfd`: whether it
/// reaped it; `None` when it is not (or no longer) this process's child.
fn waitid_pidfd(pidfd: &OwnedFd) -> Option<bool> {
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
    (rc == 0).then(|| unsafe { info.si_pid() } != 0)
}

fn reap_forever(wake: OwnedFd, adopted: std::sync::mpsc::Receiver<OwnedFd>) {
    let mut pidfds: Vec<OwnedFd> = Vec::new();
    let backstop = PollTimeout::try_from(SWEEP_BACKSTOP).unwrap_or(PollTimeout::MAX);
    loop {
        let ready: Vec<bool> = {
            let mut fds = vec![PollFd::new(wake.as_fd(), PollFlags::POLLIN)];
            fds.extend(
                pidfds
                    .iter()
                    .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN)),
            );
            if poll(&mut fds, backstop).is_err() {
                continue;
            }
            fds.iter()
                .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        if ready[0] {
            let mut buf = [0u8; 256];
            while matches!(nix::unistd::read(&wake, &mut buf), Ok(n) if n > 0) {}
            pidfds.extend(adopted.try_iter());
        }
        let mut index = 0;
        pidfds.retain(|fd| {
            index += 1;
            !(ready.get(index).copied().unwrap_or(false) && reap(fd))
        });
        // On a wake (SIGCHLD, adoption) or the backstop's timeout alike.
        sweep();
    }
}

/// Reaps every child of this process that has ended in a sandbox's cgroup
/// (see the module's doc); how many it reaped.
pub(crate) fn sweep() -> usize {
    let me = std::process::id();
    let sessions: Vec<u32> = match REAPER.get() {
        Some(Ok(reaper)) => reaper
            .sessions
            .lock()
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let mut reaped = 0;
    for pid in children(me) {
        let read = |file: &str| std::fs::read_to_string(format!("/proc/{pid}/{file}"));
        // Most children run: one read tells.
        if !read("stat").is_ok_and(|stat| is_ended_child(&stat, me)) {
            continue;
        }
        // The pidfd before the checks that decide: it names this process
        // even if the pid is reaped and reused while we look, so the checks
        // can only let through a waitid that finds nothing.
        let Some(pidfd) = pidfd_open(pid) else {
            continue;
        };
        let (Ok(stat), Ok(cgroup)) = (read("stat"), read("cgroup")) else {
            continue;
        };
        if is_sandbox_orphan(&stat, &cgroup, me, &sessions) && reap_ended(&pidfd) {
            reaped += 1;
        }
    }
    reaped
}

/// Whether the process described by `/proc/<pid>/stat` and
/// `/proc/<pid>/cgroup` texts has ended, is a child of `me`, and is a
/// sandbox's: it ended in a sandbox's cgroup (in any hierarchy: cgroup v1
/// lists one line per hierarchy, v2 one line), or its session is one of
/// `sessions`.
fn is_sandbox_orphan(stat: &str, cgroup: &str, me: u32, sessions: &[u32]) -> bool {
    let below = format!("{SANDBOX_CGROUPS}/");
    let in_sandbox_cgroup = cgroup
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .any(|path| path.starts_with(&below));
    let in_sandbox_session = session_of(stat).is_some_and(|s| sessions.contains(&s));
    is_ended_child(stat, me) && (in_sandbox_cgroup || in_sandbox_session)
}

/// Whether `/proc/<pid>/stat` text is of a child of `me` that has ended
/// (a zombie).
fn is_ended_child(stat: &str, me: u32) -> bool {
    stat_field(stat, 0) == Some("Z") && parent_of(stat) == Some(me)
}

/// The pids of `me`'s children: from each thread's `children` file (an
/// orphan is handed to any thread of its subreaper), else, on a kernel
/// without them, from every process's parent.
fn children(me: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut listed = false;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            listed = true;
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    if !listed {
        pids = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|stat| parent_of(&stat) == Some(me))
            })
            .collect();
    }
    pids.sort_unstable();
    pids.dedup();
    pids
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

    #[test]
    fn only_ended_children_of_a_sandbox_are_swept() {
        let zombie = "42 (exe) Z 7 42 42 0 -1";
        let v1 = "8:pids:/garrison/sb-1\n4:memory:/garrison/sb-1\n0::/\n";
        let root = "8:pids:/\n4:memory:/\n0::/\n";
        assert!(is_sandbox_orphan(zombie, v1, 7, &[]));
        assert!(is_sandbox_orphan(
            zombie,
            "0::/garrison/sb-1 (deleted)\n",
            7,
            &[]
        ));
        // Its cgroup gone, it is known by its session.
        let stub = "43 (exe) Z 7 40 40 0 -1";
        assert!(is_sandbox_orphan(stub, root, 7, &[40]));
        assert!(!is_sandbox_orphan(stub, root, 7, &[41]));
        // Another parent's, alive, or neither in a sandbox's cgroup nor its
        // session: left alone (a child Garrison spawned is waited for by
        // whoever spawned it).
        assert!(!is_sandbox_orphan(zombie, v1, 8, &[]));
        assert!(!is_sandbox_orphan("42 (exe) S 7 42 42 0 -1", v1, 7, &[42]));
        assert!(!is_sandbox_orphan(
            zombie,
            "8:pids:/\n0::/user.slice\n",
            7,
            &[]
        ));
        assert!(!is_sandbox_orphan(zombie, "0::/garrison\n", 7, &[]));
        assert!(!is_sandbox_orphan(zombie, "0::/garrisonx/sb\n", 7, &[]));
        // A name that looks like fields does not fool the state.
        assert!(!is_sandbox_orphan("42 (a) Z 7) S 7 1 1", v1, 7, &[1]));
        assert_eq!(session_of("42 (a) Z 7) S 7 1 1"), Some(1));
        assert_eq!(session_of(stub), Some(40));
    }
}
