//! Which host processes belong to a sandbox, and which of those run outside
//! it: the per-sandbox helpers whose memory is Garrison's overhead.
//!
//! One scan of `/proc` reads every process once; [`classify`] then sorts
//! them per sandbox, so fifty sandboxes cost one scan, not fifty.
//!
//! A process is *inside* a sandbox when it is in the sandbox's cgroup (the
//! `local` backend puts a container in `/garrison/<name>`) or carries the
//! sandbox's marker variable, which the bench puts in the environment of
//! every process it spawns (the `host` backend has no cgroup). A *helper* is
//! a process that is not inside but works for the sandbox: one whose command
//! line names it (a network helper would name the sandbox's network
//! namespace, a runc call names the container), or the parent of a process inside (the `host`
//! backend's shim). Init and the bench itself are never helpers: a
//! container's init is reparented to the host's init once runc exits.

use std::path::Path;

/// What the scan keeps of one process.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    /// `/proc/<pid>/comm`: the executable's short name.
    pub comm: String,
    /// Resident memory (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Arguments, NUL-separated as the kernel gives them.
    pub cmdline: Vec<u8>,
    /// `/proc/<pid>/cgroup` as text.
    pub cgroup: String,
    /// Environment, NUL-separated.
    pub environ: Vec<u8>,
}

/// How [`classify`] recognises one sandbox.
#[derive(Clone, Debug)]
pub(super) struct SandboxKey {
    /// The sandbox's name (`garrison-<hash>`).
    pub name: String,
    /// `NAME=VALUE` in the environment of every process the bench spawned.
    pub marker: String,
}

/// One sandbox's processes.
#[derive(Clone, Debug, Default)]
pub(super) struct Membership {
    pub inside: Vec<ProcInfo>,
    pub helpers: Vec<ProcInfo>,
}

/// Every user-space process now running (kernel threads have no `VmRSS`
/// and are skipped; processes that exit mid-scan are simply missing).
pub(super) fn scan() -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read)
        .collect()
}

fn read(pid: u32) -> Option<ProcInfo> {
    let dir = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().trim_end_matches("kB").trim().to_owned())
    };
    Some(ProcInfo {
        pid,
        ppid: field("PPid:")?.parse().ok()?,
        comm: std::fs::read_to_string(dir.join("comm"))
            .map(|c| c.trim().to_owned())
            .unwrap_or_default(),
        rss_kib: field("VmRSS:")?.parse().ok()?,
        cmdline: std::fs::read(dir.join("cmdline")).unwrap_or_default(),
        cgroup: std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default(),
        environ: std::fs::read(dir.join("environ")).unwrap_or_default(),
    })
}

/// Sorts `procs` into the processes inside `key`'s sandbox and its helpers
/// outside (see the module's documentation). `own_pid` is the bench's.
pub(super) fn classify(procs: &[ProcInfo], key: &SandboxKey, own_pid: u32) -> Membership {
    let cgroup_suffix = format!("/garrison/{}", key.name);
    let is_inside = |p: &ProcInfo| {
        p.cgroup
            .lines()
            .any(|l| l.trim_end().ends_with(&cgroup_suffix))
            || p.environ
                .split(|&b| b == 0)
                .any(|v| v == key.marker.as_bytes())
    };
    let inside: Vec<ProcInfo> = procs.iter().filter(|p| is_inside(p)).cloned().collect();
    let parents: Vec<u32> = inside.iter().map(|p| p.ppid).collect();
    let helpers = procs
        .iter()
        .filter(|p| p.pid > 1 && p.pid != own_pid && !is_inside(p))
        .filter(|p| parents.contains(&p.pid) || mentions(&p.cmdline, &key.name))
        .cloned()
        .collect();
    Membership { inside, helpers }
}

fn mentions(haystack: &[u8], needle: &str) -> bool {
    let needle = needle.as_bytes();
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: u32, ppid: u32, comm: &str) -> ProcInfo {
        ProcInfo {
            pid,
            ppid,
            comm: comm.to_owned(),
            rss_kib: 1000,
            cgroup: "0::/user.slice\n".to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn finds_helpers_outside_the_sandbox() {
        let key = SandboxKey {
            name: "garrison-abc".to_owned(),
            marker: "BENCH=garrison-abc".to_owned(),
        };
        let pasta = ProcInfo {
            cmdline: b"pasta\0--netns\0/run/netns/garrison-abc-1234\0".to_vec(),
            ..proc(10, 1, "pasta")
        };
        let tini = ProcInfo {
            cgroup: "0::/garrison/garrison-abc\n".to_owned(),
            ..proc(20, 1, "tini-static")
        };
        let host_shim = proc(30, 99, "garrison");
        let remote = ProcInfo {
            environ: b"PATH=/bin\0BENCH=garrison-abc\0".to_vec(),
            ..proc(31, 30, "sleep")
        };
        let other_sandbox = ProcInfo {
            cmdline: b"pasta\0--netns\0/run/netns/garrison-def-1234\0".to_vec(),
            ..proc(40, 1, "pasta")
        };
        let bench = proc(99, 1, "garrison");
        let all = [pasta, tini, host_shim, remote, other_sandbox, bench];
        let m = classify(&all, &key, 99);
        let pids = |v: &[ProcInfo]| v.iter().map(|p| p.pid).collect::<Vec<_>>();
        assert_eq!(pids(&m.inside), [20, 31]);
        // Init (tini's parent) and the bench (the shim's parent) are not.
        assert_eq!(pids(&m.helpers), [10, 30]);
    }
}
