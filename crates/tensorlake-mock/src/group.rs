//! A process group the mock started, signalled only while it is still
//! that process's.
//!
//! A group's id is its leader's pid. Once the leader has been reaped the
//! kernel may give that number to any new process, and on a busy test
//! machine (pid_max 32768, hundreds of tests forking) it soon does: a
//! `killpg` to a sandbox's old group would then stop, continue or kill an
//! unrelated process of another test. So the group as a whole is signalled
//! only until its leader is reaped; after that, only the members it left
//! (daemons started before the reap) are, each by pid.

use std::sync::Mutex;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

pub(crate) struct Group {
    pgid: i32,
    /// When the leader was reaped, in clock ticks since boot (the unit of
    /// `/proc/<pid>/stat`'s start time).
    reaped_at: Mutex<Option<u64>>,
}

impl Group {
    pub(crate) fn new(pgid: i32) -> Self {
        Self {
            pgid,
            reaped_at: Mutex::new(None),
        }
    }

    /// The leader has been reaped: its pid may be reused from now on. Its
    /// waiter calls this as soon as the wait returns.
    pub(crate) fn reaped(&self) {
        let mut at = self.reaped_at.lock().expect("group");
        at.get_or_insert_with(boot_ticks);
    }

    /// Sends `signal` to the group while its leader lives, else to the
    /// members it left.
    pub(crate) fn signal(&self, signal: Signal) {
        if self.pgid <= 1 {
            return;
        }
        // Held while signalling, so the leader cannot be marked reaped in
        // between (the reap itself happens outside; a pid freed then cannot
        // be handed out again within the microseconds before the mark).
        let at = self.reaped_at.lock().expect("group");
        match *at {
            None => {
                let _ = killpg(Pid::from_raw(self.pgid), signal);
            }
            Some(reaped_at) => {
                for pid in members_started_by(self.pgid, reaped_at) {
                    let _ = kill(Pid::from_raw(pid), signal);
                }
            }
        }
    }
}

/// Clock ticks since boot now.
fn boot_ticks() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    assert_eq!(read, 0, "CLOCK_BOOTTIME is readable on Linux");
    let per_second = ticks_per_second();
    now.tv_sec as u64 * per_second + now.tv_nsec as u64 * per_second / 1_000_000_000
}

fn ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as u64 } else { 100 }
}

/// Processes in group `pgid` that started no later than `ticks` after
/// boot: members of the group as it was, not of a later group that reused
/// its id (whose processes all started after the reap).
fn members_started_by(pgid: i32, ticks: u64) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the command (which may hold spaces): state,
            // ppid, pgrp, ..., starttime is the 20th.
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let group = fields.get(2).and_then(|f| f.parse::<i32>().ok());
            let started = fields.get(19).and_then(|f| f.parse::<u64>().ok());
            group == Some(pgid) && started.is_some_and(|s| s <= ticks)
        })
        .collect()
}
