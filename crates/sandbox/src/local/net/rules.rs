//! The nftables ruleset installed inside each sandbox's namespace.
//!
//! One table, `inet garrison`, filters what the sandbox sends (hook
//! `output`; there is no forwarding inside the namespace) and what it
//! receives (hook `input`). Every address list is a named set, so later
//! work (policy enforcement, DNS-driven hostname allow-lists, refreshing the
//! host's addresses) only adds elements or fills the `session_policy` chain and
//! never rewrites the base rules:
//!
//! ```text
//! output (policy accept):
//!   oif lo                                  accept   the namespace's own loopback and addresses
//!   ct established,related                  accept
//!   ICMPv6 neighbour discovery              accept   IPv6 next hop resolution
//!   @host_loopback_v4/6 . tcp @gateway_ports accept  the one path to the gateway
//!   @host_loopback_v4/6                     refuse   every other port of the host's loopback
//!   @blocked_v4/6                           refuse   169.254.0.0/16, fd00:ec2::254, fe80::/10
//!   @host_addrs_v4/6                        refuse   the host's own addresses
//!   jump session_policy                              the policy hook (see below)
//!   (end of chain)                          accept   outbound connectivity
//! session_policy: empty: accept the rest. Owned by `apply_policy`.
//! refuse: TCP → RST, else ICMP admin-prohibited
//! input (policy drop): lo, established/related, ICMP
//! ```
//!
//! Refused, not dropped: a TCP connect to a forbidden address fails at once
//! with "connection refused" instead of hanging for a minute, so an agent
//! notices and moves on. Nothing is revealed by it: the sandbox knows the
//! rules are there anyway.
//!
//! The policy hook: `session_policy` is jumped to after the always-on rules, so no
//! policy can open what they close. A rule there that `return`s lets the
//! packet through (the output chain then accepts it); `goto refuse` closes.
//! Enforcing `spec.network_policy` (a later issue) therefore means:
//! fill `allow_v4`/`allow_v6` (and DNS-learned sets), and make `session_policy`
//! `ip daddr @allow_v4 return; ip6 daddr @allow_v6 return; goto refuse`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The nftables table every rule lives in (family `inet`).
pub(crate) const TABLE: &str = "garrison";

/// Everything the base ruleset depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BaseRules {
    /// Addresses pasta maps onto the host's loopback (its gateway addresses).
    pub host_loopback: BTreeSet<IpAddr>,
    /// The gateway's port on the host's loopback, if the gateway is there.
    pub gateway_port: Option<u16>,
    /// The host's own addresses (loopback excluded: it is `host_loopback`'s
    /// business), as seen when the namespace was made.
    pub host_addrs: BTreeSet<IpAddr>,
}

/// Address ranges never reachable from a sandbox, whatever the policy:
/// link-local (cloud metadata services live at 169.254.169.254) and AWS's
/// IPv6 metadata address.
pub(crate) const BLOCKED_V4: &[(Ipv4Addr, u8)] = &[(Ipv4Addr::new(169, 254, 0, 0), 16)];
/// See [`BLOCKED_V4`]; `fe80::/10` is IPv6 link-local.
pub(crate) const BLOCKED_V6: &[(Ipv6Addr, u8)] = &[
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), 128),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
];

fn v4s(addrs: &BTreeSet<IpAddr>) -> Vec<String> {
    addrs
        .iter()
        .filter(|a| a.is_ipv4())
        .map(|a| a.to_string())
        .collect()
}

fn v6s(addrs: &BTreeSet<IpAddr>) -> Vec<String> {
    addrs
        .iter()
        .filter(|a| a.is_ipv6())
        .map(|a| a.to_string())
        .collect()
}

/// One `set` declaration; nft refuses an empty `elements = { }`, so an
/// empty set has no elements line.
fn set(out: &mut String, name: &str, kind: &str, interval: bool, elements: &[String]) {
    let _ = write!(out, "\tset {name} {{ type {kind};");
    if interval {
        out.push_str(" flags interval;");
    }
    if !elements.is_empty() {
        let _ = write!(out, " elements = {{ {} }};", elements.join(", "));
    }
    out.push_str(" }\n");
}

/// The whole ruleset as an `nft -f` script that replaces any previous one
/// atomically (`table` then `delete table` makes the delete safe when the
/// table does not exist yet). Every value interpolated is a typed address
/// or port, so nothing from a session can inject rules.
pub(crate) fn base_ruleset(rules: &BaseRules) -> String {
    let mut s = format!("table inet {TABLE}\ndelete table inet {TABLE}\ntable inet {TABLE} {{\n");
    set(
        &mut s,
        "host_loopback_v4",
        "ipv4_addr",
        false,
        &v4s(&rules.host_loopback),
    );
    set(
        &mut s,
        "host_loopback_v6",
        "ipv6_addr",
        false,
        &v6s(&rules.host_loopback),
    );
    let ports: Vec<String> = rules.gateway_port.iter().map(u16::to_string).collect();
    set(&mut s, "gateway_ports", "inet_service", false, &ports);
    let cidrs4: Vec<String> = BLOCKED_V4.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    let cidrs6: Vec<String> = BLOCKED_V6.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    set(&mut s, "blocked_v4", "ipv4_addr", true, &cidrs4);
    set(&mut s, "blocked_v6", "ipv6_addr", true, &cidrs6);
    set(
        &mut s,
        "host_addrs_v4",
        "ipv4_addr",
        false,
        &v4s(&rules.host_addrs),
    );
    set(
        &mut s,
        "host_addrs_v6",
        "ipv6_addr",
        false,
        &v6s(&rules.host_addrs),
    );
    // Filled by policy enforcement (a later issue); declared now so that it
    // only adds elements.
    set(&mut s, "allow_v4", "ipv4_addr", true, &[]);
    set(&mut s, "allow_v6", "ipv6_addr", true, &[]);
    s.push_str(
        "\tchain output {
\t\ttype filter hook output priority filter; policy accept;
\t\toifname \"lo\" accept
\t\tct state established,related accept
\t\ticmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } accept
\t\tip daddr @host_loopback_v4 tcp dport @gateway_ports accept
\t\tip6 daddr @host_loopback_v6 tcp dport @gateway_ports accept
\t\tip daddr @host_loopback_v4 goto refuse
\t\tip6 daddr @host_loopback_v6 goto refuse
\t\tip daddr @blocked_v4 goto refuse
\t\tip6 daddr @blocked_v6 goto refuse
\t\tip daddr @host_addrs_v4 goto refuse
\t\tip6 daddr @host_addrs_v6 goto refuse
\t\tjump session_policy
\t}
\tchain session_policy {
\t}
\tchain refuse {
\t\tmeta l4proto tcp reject with tcp reset
\t\treject with icmpx type admin-prohibited
\t}
\tchain input {
\t\ttype filter hook input priority filter; policy drop;
\t\tiifname \"lo\" accept
\t\tct state established,related accept
\t\tmeta l4proto { icmp, ipv6-icmp } accept
\t}
}
",
    );
    s
}

/// An `nft -f` script that replaces the `session_policy` chain's rules atomically.
pub(crate) fn policy_script(policy: &fleet::NetworkPolicy) -> String {
    let mut s = format!(
        "flush chain inet {TABLE} session_policy\ntable inet {TABLE} {{\n\tchain session_policy {{\n"
    );
    for rule in policy_rules(policy) {
        let _ = writeln!(s, "\t\t{rule}");
    }
    s.push_str("\t}\n}\n");
    s
}

/// The rules of the `session_policy` chain for `policy`.
///
/// TODO(issue 5, network policy enforcement): with `enabled`, put the
/// policy's `ipv4`/`ipv6` rules into `allow_v4`/`allow_v6` (validated: they
/// come from the server), resolve `hostname` rules through the per-sandbox
/// resolver into further sets, and return
/// `["ip daddr @allow_v4 return", "ip6 daddr @allow_v6 return", "goto refuse"]`
/// (plus DNS to the resolver). Until then an enabled policy is accepted but
/// NOT enforced: everything the always-on rules allow stays reachable, and
/// the backend must keep reporting `enforces_network_policy: false`.
fn policy_rules(policy: &fleet::NetworkPolicy) -> Vec<String> {
    // An enabled policy deliberately gets the same empty chain as a
    // disabled one for now; see above.
    let _not_enforced_yet = policy.enabled;
    Vec::new()
}

/// Whether [`policy_rules`] enforces `policy` (false until issue 5 lands).
pub(crate) fn enforces(policy: &fleet::NetworkPolicy) -> bool {
    !policy.enabled
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> BaseRules {
        BaseRules {
            host_loopback: ["192.0.2.1", "fd00::1"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect(),
            gateway_port: Some(8790),
            host_addrs: ["192.0.2.2", "10.1.2.3", "fd00::2"]
                .iter()
                .map(|a| a.parse().unwrap())
                .collect(),
        }
    }

    #[test]
    fn base_ruleset_names_the_gateway_and_the_blocked_ranges() {
        let s = base_ruleset(&rules());
        assert!(s.starts_with("table inet garrison\ndelete table inet garrison\n"));
        assert!(s.contains("set host_loopback_v4 { type ipv4_addr; elements = { 192.0.2.1 }; }"));
        assert!(s.contains("set host_loopback_v6 { type ipv6_addr; elements = { fd00::1 }; }"));
        assert!(s.contains("set gateway_ports { type inet_service; elements = { 8790 }; }"));
        assert!(s.contains("elements = { 169.254.0.0/16 }"));
        assert!(s.contains("elements = { fd00:ec2::254/128, fe80::/10 }"));
        assert!(
            s.contains("set host_addrs_v4 { type ipv4_addr; elements = { 10.1.2.3, 192.0.2.2 }; }")
        );
        assert!(s.contains("set allow_v4 { type ipv4_addr; flags interval; }"));
        // The gateway port is accepted before the rest of the host's loopback
        // is refused, and the policy comes after every always-on rule.
        let accept = s.find("tcp dport @gateway_ports accept").unwrap();
        let refuse = s.find("@host_loopback_v4 goto refuse").unwrap();
        let policy = s.find("jump session_policy").unwrap();
        assert!(accept < refuse && refuse < policy);
        assert!(s.rfind("goto refuse").unwrap() < policy);
    }

    #[test]
    fn no_gateway_port_leaves_the_set_empty() {
        let s = base_ruleset(&BaseRules {
            gateway_port: None,
            ..rules()
        });
        assert!(s.contains("set gateway_ports { type inet_service; }"));
    }

    #[test]
    fn policy_hook_accepts_for_now() {
        for enabled in [false, true] {
            let policy = fleet::NetworkPolicy {
                enabled,
                allow: vec![fleet::AllowRule::Ipv4("10.0.0.0/8".into())],
            };
            let s = policy_script(&policy);
            assert_eq!(
                s,
                "flush chain inet garrison session_policy\ntable inet garrison {\n\tchain session_policy {\n\t}\n}\n"
            );
        }
    }
}
