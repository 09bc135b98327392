//! The host's side of sandbox networking: forwarding, NAT and the gateway
//! path, in one nftables table shared by every sandbox on the host.
//!
//! ```text
//! table ip garrison_host
//!   prerouting (nat):  iifname . ip daddr . tcp dport @gateways  dnat to 127.0.0.1
//!   postrouting (nat): from the pool, out of a non-sandbox link  masquerade
//!   input:             from a sandbox link: only DNATed (gateway) and reply traffic
//!   forward:           sandbox link to sandbox link              drop
//! ```
//!
//! `gateways` holds, per sandbox whose gateway is on the host's loopback,
//! its link, its gateway address (the host's end of its link) and the
//! gateway's port: that one port is rewritten onto the host's loopback
//! (`route_localnet` on the link lets the kernel route it there), every
//! other port of the host stays closed. The sandbox's own ruleset (the
//! `rules` module) refuses the rest before it leaves the namespace; this
//! table is the second wall, out of the sandbox's reach.
//!
//! The table is made (or brought up to date) by the first create of each
//! Garrison process, and left in place (running sandboxes outlive
//! Garrison, and so must their NAT), like IPv4 forwarding, which it turns
//! on.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt as _;
use std::sync::Mutex;

use super::pool::{HOST_IF_PREFIX, POOL};
use super::sysctl::write_sysctl;
use super::tools::{self, Tools};
use sandbox::Result;

/// The host's table (family `ip`).
pub(crate) const TABLE: &str = "garrison_host";

/// The whole table as an `nft -f` script that makes it, or brings an
/// existing one to these rules, in one transaction: the chains are declared
/// (a no-op when they exist), flushed and filled again, and the
/// `gateways` set is declared but never flushed, so the paths of running
/// sandboxes stay open.
fn table_script() -> String {
    let (pool, len) = POOL;
    let gv = format!("\"{HOST_IF_PREFIX}*\"");
    let chains = [
        (
            "prerouting",
            "type nat hook prerouting priority dstnat; policy accept;",
            vec!["iifname . ip daddr . tcp dport @gateways dnat to 127.0.0.1".to_owned()],
        ),
        (
            "postrouting",
            "type nat hook postrouting priority srcnat; policy accept;",
            vec![format!("ip saddr {pool}/{len} oifname != {gv} masquerade")],
        ),
        (
            "input",
            "type filter hook input priority filter; policy accept;",
            vec![
                format!("iifname {gv} ct status dnat accept"),
                format!("iifname {gv} ct state established,related accept"),
                format!("iifname {gv} drop"),
            ],
        ),
        (
            "forward",
            "type filter hook forward priority filter; policy accept;",
            vec![format!("iifname {gv} oifname {gv} drop")],
        ),
    ];
    let mut s = format!(
        "table ip {TABLE} {{\n\tset gateways {{ typeof iifname . ip daddr . tcp dport; }}\n"
    );
    for (name, hook, _) in &chains {
        s.push_str(&format!("\tchain {name} {{ {hook} }}\n"));
    }
    s.push_str("}\n");
    for (name, _, rules) in &chains {
        s.push_str(&format!("flush chain ip {TABLE} {name}\n"));
        for rule in rules {
            s.push_str(&format!("add rule ip {TABLE} {name} {rule}\n"));
        }
    }
    s
}

/// Makes (or refreshes) the table and turns on IPv4 forwarding, once per
/// network namespace and process: creates after the first skip the `nft`
/// call.
pub(crate) async fn ensure(tools: &Tools) -> Result<()> {
    let netns = this_netns();
    if let Some(ino) = netns
        && ENSURED.lock().expect("not poisoned").contains(&ino)
    {
        return Ok(());
    }
    write_sysctl("net/ipv4/ip_forward", "1")?;
    tools::run(&tools.nft, ["-f", "-"], None, Some(&table_script())).await?;
    if let Some(ino) = netns {
        ENSURED.lock().expect("not poisoned").insert(ino);
    }
    Ok(())
}

/// Network namespaces (by inode) where [`ensure`] found or made the table.
static ENSURED: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());

/// This thread's network namespace: the bench and tests run Garrison in
/// namespaces of their own, next to the host's.
fn this_netns() -> Option<u64> {
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .ok()
}

fn gateway_element(host_if: &str, gateway: Ipv4Addr, port: u16) -> String {
    format!("{{ \"{host_if}\" . {gateway} . {port} }}")
}

/// Opens the gateway path of one sandbox: `gateway:port` on its link goes
/// to the host's loopback, same port.
pub(crate) async fn open_gateway(
    tools: &Tools,
    host_if: &str,
    gateway: Ipv4Addr,
    port: u16,
) -> Result<()> {
    let script = format!(
        "add element ip {TABLE} gateways {}\n",
        gateway_element(host_if, gateway, port)
    );
    if tools::run(&tools.nft, ["-f", "-"], None, Some(&script))
        .await
        .is_ok()
    {
        return Ok(());
    }
    // The table went away since `ensure` saw it (a firewall reload that
    // flushed the ruleset): make it again, once.
    if let Some(ino) = this_netns() {
        ENSURED.lock().expect("not poisoned").remove(&ino);
    }
    ensure(tools).await?;
    tools::run(&tools.nft, ["-f", "-"], None, Some(&script)).await?;
    Ok(())
}

/// Closes every gateway path of the link `host_if` (found in the table,
/// so a sandbox whose state was lost in a crash is closed too); a path
/// already closed, or a table never made, is fine.
pub(crate) async fn close_gateways(tools: &Tools, host_if: &str) -> Result<()> {
    let Ok(json) = tools::run(
        &tools.nft,
        ["-j", "list", "set", "ip", TABLE, "gateways"],
        None,
        None,
    )
    .await
    else {
        return Ok(());
    };
    let script: String = gateways_of(&json, host_if)
        .into_iter()
        .map(|(gateway, port)| {
            format!(
                "delete element ip {TABLE} gateways {}\n",
                gateway_element(host_if, gateway, port)
            )
        })
        .collect();
    if !script.is_empty() {
        tools::run(&tools.nft, ["-f", "-"], None, Some(&script)).await?;
    }
    Ok(())
}

/// The `(gateway, port)` elements of link `host_if` in `nft -j list set`
/// output.
fn gateways_of(json: &str, host_if: &str) -> Vec<(Ipv4Addr, u16)> {
    let parsed: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let items = parsed.get("nftables").and_then(|n| n.as_array());
    items
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("set")?.get("elem")?.as_array())
        .flatten()
        .filter_map(|elem| {
            let parts = elem.get("concat")?.as_array()?;
            match parts.as_slice() {
                [name, gateway, port] if name.as_str() == Some(host_if) => Some((
                    gateway.as_str()?.parse().ok()?,
                    u16::try_from(port.as_u64()?).ok()?,
                )),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_nats_the_pool_and_opens_only_listed_gateways() {
        let s = table_script();
        assert!(
            s.contains("ip saddr 10.213.0.0/16 oifname != \"gv*\" masquerade"),
            "{s}"
        );
        assert!(s.contains("tcp dport @gateways dnat to 127.0.0.1"), "{s}");
        assert!(s.contains("iifname \"gv*\" drop"), "{s}");
        assert_eq!(
            gateway_element("gv0123456789", Ipv4Addr::new(10, 213, 0, 1), 8080),
            "{ \"gv0123456789\" . 10.213.0.1 . 8080 }"
        );
    }

    #[test]
    fn finds_the_gateways_of_one_link() {
        let json = r#"{"nftables":[{"metainfo":{"version":"1.0.6"}},{"set":{"family":"ip",
            "name":"gateways","table":"garrison_host","elem":[
            {"concat":["gva","10.213.0.1",8080]},{"concat":["gvb","10.213.0.5",8080]},
            {"concat":["gva","10.213.0.1",9090]}]}}]}"#;
        let one = Ipv4Addr::new(10, 213, 0, 1);
        assert_eq!(gateways_of(json, "gva"), vec![(one, 8080), (one, 9090)]);
        assert!(gateways_of(json, "gvc").is_empty());
        assert!(gateways_of("", "gva").is_empty());
    }
}
