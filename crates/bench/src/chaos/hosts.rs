//! The chaos run's "hosts": network namespaces on a bridge this process
//! creates, so each Garrison reaches the emulator and the object store only
//! through the bridge's address, where nft rules in its namespace can cut
//! it off. Everything is removed on drop. Needs root, `ip` and `nft`.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// A bridge and one namespace per host.
pub(crate) struct Hosts {
    bridge: String,
    namespaces: Vec<String>,
    subnet: u8,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Hosts {
    /// Builds the bridge and `count` hosts, on a /24 of 198.19.0.0/16 (the
    /// benchmarking range; the tests use 198.18.0.0/16) that no interface
    /// of this machine has yet, the first from one chosen by pid: two runs
    /// at once (the suite's two chaos tests) must not share one.
    pub(crate) fn build(count: usize) -> anyhow::Result<Hosts> {
        let tag = format!("{:05x}", std::process::id() & 0xfffff);
        let subnet = free_subnet(std::process::id())?;
        let bridge = format!("gcb{tag}");
        let _ = Command::new("ip").args(["link", "del", &bridge]).output();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
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
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for n in 0..count {
            let ns = format!("gch{tag}-{n}");
            let outer = format!("gcv{tag}{n}");
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
            ip(&["netns", "add", &ns])?;
            hosts.namespaces.push(ns.clone());
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &outer, "master", &bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            let addr = format!("{}/24", hosts.addr(n));
            for args in [
                vec!["link", "set", "lo", "up"],
                vec!["address", "add", &addr, "dev", "eth0"],
                vec!["link", "set", "eth0", "up"],
            ] {
                let mut all = vec!["-n", ns.as_str()];
                all.extend(args);
                ip(&all)?;
            }
        }
        Ok(hosts)
    }

    /// The bridge's address: where the emulator and the store listen.
    pub(crate) fn shared_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(198, 19, self.subnet, 1)
    }

    /// Host `n`'s own address.
    pub(crate) fn addr(&self, n: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 19, self.subnet, 10 + n as u8)
    }

    /// The command that runs a program in host `n`'s namespace (`nsenter`,
    /// which keeps the mounts, so the host backend sees the same files).
    pub(crate) fn prefix(&self, n: usize) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--net=/run/netns/{}", self.namespaces[n]),
            "--".into(),
        ]
    }

    /// Drops every packet between host `n` and `targets` (none: heals).
    /// The table is replaced whole, so cuts never pile up.
    pub(crate) fn cut(&self, n: usize, targets: &[SocketAddr]) -> anyhow::Result<()> {
        let mut rules = String::from("table inet chaos {}\ndelete table inet chaos\n");
        if !targets.is_empty() {
            rules.push_str("table inet chaos {\n chain out { type filter hook output priority 0; policy accept;\n");
            for t in targets {
                rules.push_str(&format!(
                    "  ip daddr {} tcp dport {} drop\n",
                    t.ip(),
                    t.port()
                ));
            }
            rules.push_str(" }\n chain in { type filter hook input priority 0; policy accept;\n");
            for t in targets {
                rules.push_str(&format!(
                    "  ip saddr {} tcp sport {} drop\n",
                    t.ip(),
                    t.port()
                ));
            }
            rules.push_str(" }\n}\n");
        }
        let mut argv = self.prefix(n);
        argv.extend(["nft".into(), "-f".into(), "-".into()]);
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running nft")?;
        child
            .stdin
            .take()
            .context("nft's stdin")?
            .write_all(rules.as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
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

/// The first /24 of 198.19.0.0/16, from `pid`'s, that no interface here
/// has an address in.
fn free_subnet(pid: u32) -> anyhow::Result<u8> {
    let out = Command::new("ip")
        .args(["-4", "-o", "address", "show"])
        .output()?;
    let taken = String::from_utf8_lossy(&out.stdout).into_owned();
    (0..250u32)
        .map(|i| ((pid + i) % 250) as u8 + 1)
        .find(|n| !taken.contains(&format!(" 198.19.{n}.")))
        .context("every 198.19.N.0/24 bench subnet is in use on this machine")
}
