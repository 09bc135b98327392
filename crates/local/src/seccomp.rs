//! The seccomp filter of a session container.
//!
//! The agent is root in its container, so the kernel's attack surface is the
//! wall that matters: most container escapes start with a syscall an
//! ordinary build never makes (a user namespace that hands back
//! CAP_SYS_ADMIN, nf_tables through it, io_uring, keyrings shared with the
//! host, bpf, mounting, loading modules). This profile refuses every
//! syscall Docker's default profile refuses to a container without
//! CAP_SYS_ADMIN and the escape-path ones above, and allows the rest, so
//! that package managers, compilers, debuggers (ptrace of one's own
//! children) and browsers keep working.
//!
//! It is a deny list rather than Docker's allow list: each entry here names
//! a reason, and a syscall newer than this list is allowed, as under
//! Docker's profile on a kernel newer than it.

use serde_json::{Value, json};

/// Refused with EPERM, as Docker refuses them.
pub(crate) const DENIED: &[&str] = &[
    // Namespaces: a new user namespace is root again (CAP_SYS_ADMIN inside
    // it), the door to most kernel bugs; the others need that or SYS_ADMIN.
    "unshare",
    "setns",
    // Mounting and the new mount API.
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    // Keyrings are not namespaced: root's keyring is the host's.
    "keyctl",
    "add_key",
    "request_key",
    // In-kernel programs, async I/O engines with a history of escapes,
    // performance counters (side channels), userfaultfd (exploit timing).
    "bpf",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "perf_event_open",
    "userfaultfd",
    // The kernel itself: modules, kexec, reboot, swap, clocks, accounting.
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "acct",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "nfsservctl",
    "sysfs",
    "_sysctl",
    "uselib",
    "ustat",
    "vhangup",
    // File handles bypass the mount namespace (the "shocker" escape).
    "open_by_handle_at",
    "name_to_handle_at",
    // Raw port I/O and old x86 modes.
    "iopl",
    "ioperm",
    "vm86",
    "vm86old",
    "fanotify_init",
];

/// Flags of clone(2) that make a namespace; refused like `unshare`.
const NAMESPACE_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWNS", 0x0002_0000),
    ("CLONE_NEWCGROUP", 0x0200_0000),
    ("CLONE_NEWUTS", 0x0400_0000),
    ("CLONE_NEWIPC", 0x0800_0000),
    ("CLONE_NEWUSER", 0x1000_0000),
    ("CLONE_NEWPID", 0x2000_0000),
    ("CLONE_NEWNET", 0x4000_0000),
];

const EPERM: i64 = 1;
const ENOSYS: i64 = 38;

/// The architectures a filter must name for the host's syscalls (and its
/// compat modes) to be matched by name.
fn architectures() -> &'static [&'static str] {
    match std::env::consts::ARCH {
        "aarch64" => &["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        _ => &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    }
}

/// The `linux.seccomp` section of `config.json`.
pub(crate) fn profile() -> Value {
    let mut rules = vec![json!({
        "names": DENIED,
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": EPERM,
    })];
    // clone3 passes its flags in memory, where seccomp cannot look; ENOSYS
    // makes the C library fall back to clone, whose flags it can.
    rules.push(json!({
        "names": ["clone3"],
        "action": "SCMP_ACT_ERRNO",
        "errnoRet": ENOSYS,
    }));
    // x86 and arm take the flags as clone's first argument (s390 its second;
    // not a platform Garrison builds for).
    for (_, flag) in NAMESPACE_FLAGS {
        rules.push(json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
        }));
    }
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": architectures(),
        "syscalls": rules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied_with(profile: &Value, errno: i64) -> Vec<String> {
        profile["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["errnoRet"] == errno && r.get("args").is_none())
            .flat_map(|r| r["names"].as_array().unwrap().iter())
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_escape_paths_are_refused() {
        let p = profile();
        assert_eq!(p["defaultAction"], "SCMP_ACT_ALLOW");
        let denied = denied_with(&p, EPERM);
        for call in [
            "unshare",
            "setns",
            "keyctl",
            "add_key",
            "request_key",
            "bpf",
            "io_uring_setup",
            "mount",
            "open_by_handle_at",
            "init_module",
            "kexec_load",
            "perf_event_open",
            "userfaultfd",
        ] {
            assert!(denied.contains(&call.to_owned()), "{call} is allowed");
        }
        assert_eq!(denied_with(&p, ENOSYS), ["clone3"]);
    }

    #[test]
    fn what_builds_and_debuggers_need_is_left_alone() {
        let denied = denied_with(&profile(), EPERM);
        for call in [
            "ptrace",
            "clone",
            "execve",
            "personality",
            "process_vm_readv",
        ] {
            assert!(!denied.contains(&call.to_owned()), "{call} is refused");
        }
    }

    #[test]
    fn clone_is_refused_only_with_a_namespace_flag() {
        let p = profile();
        let flags: Vec<u64> = p["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["names"][0] == "clone")
            .map(|r| {
                let arg = &r["args"][0];
                assert_eq!(arg["op"], "SCMP_CMP_MASKED_EQ");
                assert_eq!(arg["index"], 0);
                assert_eq!(arg["value"], arg["valueTwo"]);
                arg["value"].as_u64().unwrap()
            })
            .collect();
        let user = NAMESPACE_FLAGS
            .iter()
            .find(|(name, _)| *name == "CLONE_NEWUSER")
            .unwrap()
            .1;
        assert!(flags.contains(&user));
        assert_eq!(flags.len(), NAMESPACE_FLAGS.len());
        // Plain fork/thread flags (CLONE_VM|CLONE_FS|CLONE_FILES|
        // CLONE_SIGHAND|CLONE_THREAD...) match no rule.
        let thread: u64 = 0x0001_0f00 | 0x0040_0000 | 0x0010_0000 | 0x0020_0000;
        assert!(flags.iter().all(|f| thread & f == 0));
    }
}
