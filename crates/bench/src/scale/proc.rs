//! What `/proc` says about one process: its CPU time and resident memory.

use std::time::Duration;

/// One reading of a process's own use (its children not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Usage {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// Resident memory, KiB.
    pub rss_kib: u64,
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`; `None` once the
/// process is gone.
pub(super) fn usage(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Usage {
        cpu: cpu_time(&stat, clock_ticks())?,
        rss_kib: rss_kib(&status)?,
    })
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as u64 } else { 100 }
}

/// `utime + stime` from a `stat` line. The command name (field 2) may hold
/// spaces and parentheses, so fields are counted from its last `)`.
fn cpu_time(stat: &str, ticks_per_sec: u64) -> Option<Duration> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // fields[0] is field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_millis(ticks * 1000 / ticks_per_sec.max(1)))
}

/// `VmRSS` from a `status` file, KiB.
fn rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_counts_user_and_system_after_an_odd_name() {
        let stat = "4242 (gar rison) (x)) S 1 4242 4242 0 -1 4194560 1200 0 0 0 250 50 7 3 20 0 9 0 100 1000 200";
        assert_eq!(cpu_time(stat, 100), Some(Duration::from_secs(3)));
        assert_eq!(cpu_time("4242 (x) S 1", 100), None);
    }

    #[test]
    fn rss_comes_from_vmrss() {
        let status = "Name:\tgarrison\nVmPeak:\t  9000 kB\nVmRSS:\t   51234 kB\nThreads:\t3\n";
        assert_eq!(rss_kib(status), Some(51_234));
        assert_eq!(rss_kib("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_has_a_reading() {
        let own = usage(std::process::id()).expect("our own /proc entry");
        assert!(own.rss_kib > 0);
    }
}
