//! A process group the mock started, signalled only while it is that
//! process's.
//!
//! A group's id is its leader's pid. Once the leader has been reaped the
//! kernel may give that number to any new process, and on a busy test
//! machine (pid_max 32768, hundreds of tests forking) it soon does: a
//! `killpg` to a sandbox's old group would then stop, continue or kill an
//! unrelated process of another test. So the group as a whole is signalled
//! only until its leader exits. Then, before the leader is reaped (its
//! zombie still holds the number, so every process in the group is one the
//! leader left), those members are taken, each by a pidfd: a pidfd names
//! one process and no other, whatever numbers are handed out later. From
//! then on only they are signalled, through their pidfds. (Processes they
//! start after that are not: the group's id no longer tells them apart.)

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitStatus;
use std::sync::Mutex;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

pub(crate) struct Group {
    pgid: i32,
    /// `None` until the leader has exited; then the members it left.
    left: Mutex<Option<Vec<OwnedFd>>>,
}

impl Group {
    pub(crate) fn new(pgid: i32) -> Self {
        Self {
            pgid,
            left: Mutex::new(None),
        }
    }

    /// Waits for `leader` (this group's) to exit, takes the members it
    /// left, and only then reaps it.
    pub(crate) async fn reap(
        &self,
        leader: &mut tokio::process::Child,
    ) -> std::io::Result<ExitStatus> {
        // Not reaped yet (only this wait reaps it): the number is the
        // leader's, and its pidfd becomes readable once it has exited.
        if let Some(pidfd) = pidfd_open(self.pgid)
            // SAFETY: an OwnedFd, open for as long as the AsyncFd owns it.
            && let Ok(exited) = unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        {
            let _ = exited.readable().await;
            self.take_members();
        }
        let status = leader.wait().await;
        // Without pidfds (Linux before 5.3) nothing is taken: after the
        // reap the group's id could be anyone's, so nobody is signalled.
        self.left
            .lock()
            .expect("group")
            .get_or_insert_with(Vec::new);
        status
    }

    /// The members of the group, the leader being a zombie: each by a
    /// pidfd, checked to name a member still once opened.
    fn take_members(&self) {
        let members = members_of(self.pgid)
            .into_iter()
            .filter(|&pid| pid != self.pgid)
            .filter_map(|pid| {
                let fd = pidfd_open(pid)?;
                // The number could have changed hands between the look and
                // the open; a new holder is in no group with this id (the
                // zombie holds it), so this tells them apart.
                (group_of(pid) == Some(self.pgid)).then_some(fd)
            })
            .collect();
        let mut left = self.left.lock().expect("group");
        left.get_or_insert(members);
    }

    /// Sends `signal` to the group while its leader lives, else to the
    /// members it left.
    pub(crate) fn signal(&self, signal: Signal) {
        if self.pgid <= 1 {
            return;
        }
        // Held while signalling: the leader is reaped only after its
        // members were taken, which waits for this lock, so `None` means
        // the group's id is still the leader's.
        let left = self.left.lock().expect("group");
        match &*left {
            None => {
                let _ = killpg(Pid::from_raw(self.pgid), signal);
            }
            Some(members) => {
                for member in members {
                    pidfd_send_signal(member, signal);
                }
            }
        }
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd, which
    // is owned here from then on.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a new fd nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn pidfd_send_signal(pidfd: &OwnedFd, signal: Signal) {
    // SAFETY: the fd is a valid pidfd; no siginfo is passed.
    let _ = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as i32,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
}

/// Process `pid`'s group id, if it exists.
fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces): state, ppid, pgrp.
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// The processes in group `pgid` now.
fn members_of(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| group_of(pid) == Some(pgid))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_of(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    /// A member the leader left behind (a daemon) is still reached once the
    /// leader has been reaped, through the pidfd taken at the leader's exit.
    #[tokio::test]
    async fn the_members_a_leader_left_are_signalled_after_its_reap() {
        use tokio::io::AsyncBufReadExt;
        let mut leader = tokio::process::Command::new("/bin/sh")
            .args(["-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"])
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let group = Group::new(leader.id().unwrap() as i32);
        let mut line = String::new();
        tokio::io::BufReader::new(leader.stdout.take().unwrap())
            .read_line(&mut line)
            .await
            .unwrap();
        let member: i32 = line.trim().parse().unwrap();
        assert!(group.reap(&mut leader).await.unwrap().success());
        assert_eq!(group.left.lock().unwrap().as_ref().map(Vec::len), Some(1));
        group.signal(Signal::SIGKILL);
        // Gone, or a zombie until whoever adopted it reaps it; the bound
        // only stops a hang.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !matches!(state_of(member), None | Some('Z')) {
            assert!(std::time::Instant::now() < deadline, "the member lives on");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
