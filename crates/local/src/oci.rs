//! The OCI runtime configuration (`config.json`) of a session container.
//!
//! Pure: everything it needs is passed in, so the security-relevant choices
//! (namespaces, capabilities, limits, mounts) are unit-tested as data.

use std::path::Path;

use serde_json::{Value, json};

use sandbox::Resources;

/// Where Garrison's own files live inside the container. Excluded from
/// snapshots; the agent can see them but they hold nothing secret after a
/// process has started.
pub const GARRISON_DIR: &str = "/.garrison";
/// Binaries put in by Garrison and the orchestrator.
pub const BIN_DIR: &str = "/.garrison/bin";
/// One directory per process, kept by its shim.
pub const PROC_DIR: &str = "/.garrison/proc";
/// tini, the container's init.
pub const INIT: &str = "/.garrison/bin/tini";
/// The shim that starts and supervises each process.
pub const SHIM: &str = "/.garrison/bin/garrison-shim";
/// The remote's working directory (the session's repositories).
pub const WORKDIR: &str = "/workspace";
/// `DEVIN_REMOTE_STATE_DIR`.
pub const STATE_DIR: &str = "/var/lib/devin-remote";
/// `HOME` of processes in the container.
pub const HOME: &str = "/root";

/// Tasks one sandbox may run at once: enough for builds, a wall against fork
/// bombs.
pub const PIDS_LIMIT: i64 = 4096;
const CPU_PERIOD_US: u64 = 100_000;

/// What the agent may do as root inside its container: the usual container
/// set for installing packages and running builds. Left out on purpose:
/// NET_ADMIN and NET_RAW (the network rules must hold), SYS_ADMIN, MKNOD,
/// SYS_PTRACE, SYS_MODULE and every other capability that reaches the host.
pub const CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_SETFCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
];

/// Inputs of [`config`].
pub struct ContainerConfig<'a> {
    /// The container's hostname.
    pub hostname: &'a str,
    /// Its CPU, memory and disk.
    pub resources: &'a Resources,
    /// `/garrison/<name>` under each cgroup controller.
    pub cgroups_path: &'a str,
    /// The network namespace to join; `None` gives a fresh, empty one.
    pub netns: Option<&'a Path>,
    /// The user namespace to join; `None` runs the container's root as
    /// host root.
    pub user_ns: Option<UserNs<'a>>,
    /// The host's cgroups can bound memory and swap together
    /// ([`swap_limit_supported`]).
    pub limit_swap: bool,
}

/// Whether memory and swap together can be bounded here: always on cgroup
/// v2 (`memory.swap.max`; runc skips it quietly where swap is off), and on
/// v1 where the kernel accounts swap (`memory.memsw.limit_in_bytes`; runc
/// fails to start a container that asks for it without).
pub fn swap_limit_supported() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
        || Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists()
}

/// A user namespace made (and pinned) by Garrison, with its maps.
#[derive(Clone, Copy)]
pub struct UserNs<'a> {
    /// The pinned namespace file.
    pub path: &'a Path,
    /// Container id 0 is this host id; the range is `userns::IDS` long.
    pub host_base: u32,
    /// The root file system where the container's uid can reach it (runc
    /// mounts it from inside the namespace, so every directory on the way
    /// must let that uid pass).
    pub rootfs: &'a Path,
}

/// The whole `config.json`.
pub fn config(c: &ContainerConfig<'_>) -> Value {
    let caps: Vec<&str> = CAPABILITIES.to_vec();
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
        // Its own cgroup tree as the root: no host cgroup paths in
        // /proc/self/cgroup.
        json!({"type": "cgroup"}),
    ];
    namespaces.push(match c.netns {
        Some(path) => json!({"type": "network", "path": path}),
        None => json!({"type": "network"}),
    });
    // runc joins the namespace and reads the maps only to know who owns
    // what it makes (/dev and the like): they are the namespace's own.
    let id_maps = c.user_ns.map(|user| {
        namespaces.push(json!({"type": "user", "path": user.path}));
        json!([{"containerID": 0, "hostID": user.host_base, "size": crate::userns::IDS}])
    });
    let memory = c.resources.memory_mb.saturating_mul(1024 * 1024);
    let quota = (c.resources.cpus * CPU_PERIOD_US as f64)
        .round()
        .max(1000.0) as i64;
    // Memory and swap together no more than memory alone: no swap beyond
    // the memory limit (v1 `memory.memsw.limit_in_bytes` = the limit; v2
    // `memory.swap.max` = 0).
    let memory_limits = if c.limit_swap {
        json!({"limit": memory, "swap": memory})
    } else {
        json!({"limit": memory})
    };
    let mut config = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": [INIT, "-s", "--", SHIM, shim::IDLE_ARG],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {
                "bounding": caps, "effective": caps, "permitted": caps, "inheritable": [], "ambient": []
            },
            // No setuid or file-capability gain past what the container
            // started with (it is root already; this closes the ways back
            // up after dropping privileges).
            "noNewPrivileges": true,
            "oomScoreAdj": 500
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": c.hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
        ],
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": c.cgroups_path,
            "resources": {
                "devices": [{"allow": false, "access": "rwm"}],
                "memory": memory_limits,
                "cpu": {"quota": quota, "period": CPU_PERIOD_US},
                "pids": {"limit": PIDS_LIMIT}
            },
            "seccomp": crate::seccomp::profile(),
            // Docker's list: host hardware, kernel memory and timing
            // (powercap's energy counters are the PLATYPUS side channel).
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
                "/sys/devices/virtual/powercap"
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"
            ]
        }
    });
    if let Some(maps) = id_maps {
        config["linux"]["uidMappings"] = maps.clone();
        config["linux"]["gidMappings"] = maps;
    }
    if let Some(user) = c.user_ns {
        config["root"]["path"] = json!(user.rootfs);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(netns: Option<&Path>) -> Value {
        config(&ContainerConfig {
            hostname: "sandbox",
            resources: &Resources {
                cpus: 1.5,
                memory_mb: 512,
                disk_mb: 1024,
            },
            cgroups_path: "/garrison/garrison-abc",
            netns,
            user_ns: None,
            limit_swap: true,
        })
    }

    #[test]
    fn limits_come_from_the_resources() {
        let c = sample(None);
        let r = &c["linux"]["resources"];
        assert_eq!(r["memory"]["limit"], 512 * 1024 * 1024);
        assert_eq!(
            r["memory"]["swap"],
            512 * 1024 * 1024,
            "no swap past the limit"
        );
        assert_eq!(r["cpu"]["quota"], 150_000);
        assert_eq!(r["cpu"]["period"], 100_000);
        assert_eq!(r["pids"]["limit"], PIDS_LIMIT);
        assert_eq!(c["linux"]["cgroupsPath"], "/garrison/garrison-abc");
    }

    #[test]
    fn dangerous_capabilities_are_dropped() {
        let c = sample(None);
        let bounding: Vec<&str> = c["process"]["capabilities"]["bounding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for cap in [
            "CAP_NET_ADMIN",
            "CAP_NET_RAW",
            "CAP_SYS_ADMIN",
            "CAP_SYS_MODULE",
            "CAP_SYS_PTRACE",
            "CAP_MKNOD",
        ] {
            assert!(!bounding.contains(&cap), "{cap} must not be granted");
        }
        assert!(
            bounding.contains(&"CAP_CHOWN"),
            "package installs need CHOWN"
        );
    }

    fn namespace_types(c: &Value) -> Vec<&str> {
        c["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn every_namespace_is_private_and_user_only_when_given() {
        let c = sample(Some(Path::new("/run/netns/x")));
        assert_eq!(
            namespace_types(&c),
            ["pid", "ipc", "uts", "mount", "cgroup", "network"]
        );
        assert_eq!(c["linux"]["namespaces"][5]["path"], "/run/netns/x");
        assert!(c["linux"].get("uidMappings").is_none());
    }

    #[test]
    fn a_user_namespace_maps_root_onto_its_host_range() {
        let c = config(&ContainerConfig {
            hostname: "sandbox",
            resources: &Resources {
                cpus: 1.0,
                memory_mb: 512,
                disk_mb: 1024,
            },
            cgroups_path: "/garrison/garrison-abc",
            netns: Some(Path::new("/run/netns/x")),
            user_ns: Some(UserNs {
                path: Path::new("/state/sandboxes/x/userns"),
                host_base: 1 << 30,
                rootfs: Path::new("/run/garrison/r/x/rootfs"),
            }),
            limit_swap: false,
        });
        assert!(c["linux"]["resources"]["memory"].get("swap").is_none());
        assert_eq!(
            namespace_types(&c),
            ["pid", "ipc", "uts", "mount", "cgroup", "network", "user"]
        );
        assert_eq!(
            c["linux"]["namespaces"][6]["path"],
            "/state/sandboxes/x/userns"
        );
        assert_eq!(c["root"]["path"], "/run/garrison/r/x/rootfs");
        for maps in ["uidMappings", "gidMappings"] {
            assert_eq!(
                c["linux"][maps],
                json!([{"containerID": 0, "hostID": 1u32 << 30, "size": 65_536}]),
                "{maps}"
            );
        }
        // Everything else stays as strict.
        assert_eq!(c["process"]["noNewPrivileges"], true);
        assert_eq!(c["linux"]["seccomp"], sample(None)["linux"]["seccomp"]);
    }

    #[test]
    fn no_new_privileges_a_seccomp_filter_and_masked_host_paths() {
        let c = sample(None);
        assert_eq!(c["process"]["noNewPrivileges"], true);
        assert_eq!(c["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW");
        let masked = c["linux"]["maskedPaths"].as_array().unwrap();
        for path in [
            "/sys/devices/virtual/powercap",
            "/proc/kcore",
            "/sys/firmware",
        ] {
            assert!(masked.iter().any(|m| m == path), "{path}");
        }
    }

    #[test]
    fn no_host_paths_are_bind_mounted() {
        let c = sample(None);
        for m in c["mounts"].as_array().unwrap() {
            assert_ne!(m["type"], "bind", "host bind mount {m}");
        }
    }

    #[test]
    fn the_init_is_tini_running_the_idle_shim() {
        let c = sample(None);
        assert_eq!(c["process"]["args"][0], INIT);
        assert_eq!(c["process"]["args"][4], shim::IDLE_ARG);
    }
}
