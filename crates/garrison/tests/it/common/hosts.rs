//! Several "hosts" on one machine: network namespaces the test creates,
//! joined by a bridge it creates, so Garrisons in different namespaces
//! share only what listens on the bridge's address (the emulator, the
//! object store). Everything is removed on drop. Needs root.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A bridge in this namespace and `count` namespaces wired to it.
pub(crate) struct Hosts {
    bridge: String,
    namespaces: Vec<String>,
    subnet: u8,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Hosts {
    /// Builds the bridge and `count` hosts. Addresses come from 198.18.0.0/15
    /// (set aside for benchmarks and tests, clear of the local backend's
    /// 10.213.0.0/16), one /24 per test process.
    pub(crate) fn build(count: usize) -> Hosts {
        // Unique per call, not only per process: `cargo test` runs several
        // tests in one process, and two of them must not share a bridge.
        static BUILT: AtomicU32 = AtomicU32::new(0);
        let nth = BUILT.fetch_add(1, Ordering::Relaxed);
        let unique = std::process::id().wrapping_mul(7).wrapping_add(nth);
        let tag = format!("{:05x}", unique & 0xfffff);
        let subnet = (unique % 250) as u8 + 1;
        let bridge = format!("gmb{tag}");
        let _ = Command::new("ip").args(["link", "del", &bridge]).output();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        let mut hosts = Hosts {
            bridge: bridge.clone(),
            namespaces: Vec::new(),
            subnet,
        };
        ip(&[
            "address",
            "add",
            &format!("{}/24", hosts.shared_addr()),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for n in 0..count {
            let ns = format!("gmh{tag}-{n}");
            let outer = format!("gmv{tag}{n}");
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
            ip(&["netns", "add", &ns]);
            hosts.namespaces.push(ns.clone());
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["link", "set", &outer, "master", &bridge]);
            ip(&["link", "set", &outer, "up"]);
            let inner = |args: &[&str]| {
                let mut all = vec!["-n", ns.as_str()];
                all.extend_from_slice(args);
                ip(&all);
            };
            inner(&["link", "set", "lo", "up"]);
            inner(&[
                "address",
                "add",
                &format!("198.18.{subnet}.{}/24", 10 + n),
                "dev",
                "eth0",
            ]);
            inner(&["link", "set", "eth0", "up"]);
        }
        hosts
    }

    /// The bridge's address: where shared services listen.
    pub(crate) fn shared_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, self.subnet, 1)
    }

    /// The command that runs a program inside host `n`'s namespace.
    /// `nsenter`, not `ip netns exec`: the latter remounts `/sys`, which
    /// hides the cgroup mount the local backend's runc needs.
    pub(crate) fn prefix(&self, n: usize) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net=/run/netns/{}", self.namespaces[n]),
            "--".into(),
        ]
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
    }
}
