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
//!   new, over MAX_CONNECTIONS tracked        refuse   one sandbox cannot fill the
//!   new, over NEW_CONNECTIONS_PER_SEC        refuse   host's conntrack table
//!   ICMPv6 neighbour discovery              accept   IPv6 next hop resolution
//!   @host_loopback_v4/6 . tcp @gateway_ports accept  the one path to the gateway
//!   @host_loopback_v4/6                     refuse   every other port of the host's end
//!   @sandbox_nets_v4                        refuse   other sandboxes and their links
//!   @blocked_v4/6                           refuse   169.254.0.0/16, fd00:ec2::254, fe80::/10
//!   @host_addrs_v4/6                        refuse   the host's own addresses
//!   @internal_v4/6 not @named_internal_v4/6 refuse   private, CGNAT, ULA... (`ranges`)
//!   jump session_policy                              the policy (see below)
//!   (end of chain)                          accept   outbound connectivity
//! session_policy: owned by `apply_policy` (`policy_script`):
//!   disabled policy: empty (accept the rest)
//!   enabled: @allow_v4/6 return; @dns_v4/6 return; goto refuse
//! refuse: TCP → RST, else ICMP admin-prohibited
//! input (policy drop): lo, established/related, ICMP
//! ```
//!
//! Refused, not dropped: a TCP connect to a forbidden address fails at once
//! with "connection refused" instead of hanging for a minute, so an agent
//! notices and moves on. Nothing is revealed by it: the sandbox knows the
//! rules are there anyway.
//!
//! The policy: `session_policy` is jumped to after the always-on rules, so
//! no policy can open what they close. A rule there that `return`s lets the
//! packet through (the output chain then accepts it); `goto refuse` closes.
//! `allow_v4`/`allow_v6` hold the policy's networks (and the gateway's
//! address when it is not on the host's loopback); `dns_v4`/`dns_v6` hold
//! what the resolver (the `dns` module) answered for allowed names, each
//! element timing out with its TTL.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

use super::ranges::{BLOCKED_V4, BLOCKED_V6, INTERNAL_V4, INTERNAL_V6};
use sandbox::policy::{Cidr, Parsed};

/// The nftables table every rule lives in (family `inet`).
pub(crate) const TABLE: &str = "garrison";

/// Everything the base ruleset depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BaseRules {
    /// The host's end of the sandbox's link, whose gateway port leads to
    /// the host's loopback.
    pub host_loopback: BTreeSet<IpAddr>,
    /// The gateway's port on the host's loopback, if the gateway is there.
    pub gateway_port: Option<u16>,
    /// The host's own addresses (loopback excluded: it is `host_loopback`'s
    /// business), as seen when the namespace was made.
    pub host_addrs: BTreeSet<IpAddr>,
}

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
    let (pool, len) = super::pool::POOL;
    set(
        &mut s,
        "sandbox_nets_v4",
        "ipv4_addr",
        true,
        &[format!("{pool}/{len}")],
    );
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
    let internal4: Vec<String> = INTERNAL_V4
        .iter()
        .map(|(a, l)| format!("{a}/{l}"))
        .collect();
    let internal6: Vec<String> = INTERNAL_V6
        .iter()
        .map(|(a, l)| format!("{a}/{l}"))
        .collect();
    set(&mut s, "internal_v4", "ipv4_addr", true, &internal4);
    set(&mut s, "internal_v6", "ipv6_addr", true, &internal6);
    // Filled by `policy_script`.
    set(&mut s, "allow_v4", "ipv4_addr", true, &[]);
    set(&mut s, "allow_v6", "ipv6_addr", true, &[]);
    set(&mut s, NAMED_INTERNAL_V4, "ipv4_addr", true, &[]);
    set(&mut s, NAMED_INTERNAL_V6, "ipv6_addr", true, &[]);
    // Keyed by the sandbox's own address: one counter per sandbox.
    s.push_str("\tset conns_v4 { type ipv4_addr; size 16; flags dynamic; }\n");
    s.push_str("\tset conns_v6 { type ipv6_addr; size 16; flags dynamic; }\n");
    let _ = write!(
        s,
        "\tchain output {{
\t\ttype filter hook output priority filter; policy accept;
\t\toifname \"lo\" accept
\t\tct state established,related accept
\t\tct state new add @conns_v4 {{ ip saddr ct count over {MAX_CONNECTIONS} }} goto refuse
\t\tct state new add @conns_v6 {{ ip6 saddr ct count over {MAX_CONNECTIONS} }} goto refuse
\t\tct state new limit rate over {NEW_CONNECTIONS_PER_SEC}/second burst {NEW_CONNECTIONS_BURST} packets goto refuse
\t\ticmpv6 type {{ nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert }} accept
\t\tip daddr @host_loopback_v4 tcp dport @gateway_ports accept
\t\tip6 daddr @host_loopback_v6 tcp dport @gateway_ports accept
\t\tip daddr @host_loopback_v4 goto refuse
\t\tip6 daddr @host_loopback_v6 goto refuse
\t\tip daddr @sandbox_nets_v4 goto refuse
\t\tip daddr @blocked_v4 goto refuse
\t\tip6 daddr @blocked_v6 goto refuse
\t\tip daddr @host_addrs_v4 goto refuse
\t\tip6 daddr @host_addrs_v6 goto refuse
\t\tip daddr @internal_v4 ip daddr != @named_internal_v4 goto refuse
\t\tip6 daddr @internal_v6 ip6 daddr != @named_internal_v6 goto refuse
\t\tjump session_policy
\t}}
\tchain session_policy {{
\t}}
\tchain refuse {{
\t\tmeta l4proto tcp reject with tcp reset
\t\treject with icmpx type admin-prohibited
\t}}
\tchain input {{
\t\ttype filter hook input priority filter; policy drop;
\t\tiifname \"lo\" accept
\t\tct state established,related accept
\t\tmeta l4proto {{ icmp, ipv6-icmp }} accept
\t}}
}}
",
    );
    s
}

/// Connections one sandbox may have tracked at once: plenty for builds and
/// browsers, and a host's conntrack table (262144 entries by default) is
/// not filled by one sandbox.
pub const MAX_CONNECTIONS: u32 = 4096;
/// New connections per second one sandbox may open (beyond a burst).
pub(crate) const NEW_CONNECTIONS_PER_SEC: u32 = 200;
pub(crate) const NEW_CONNECTIONS_BURST: u32 = 1000;

/// Sets the resolver fills with the addresses of allowed names, each
/// element with a timeout equal to its DNS TTL. Declared by
/// [`policy_script`] (declaring an existing set is a no-op), so namespaces
/// made before they existed get them too.
pub(crate) const DNS_SET_V4: &str = "dns_v4";
pub(crate) const DNS_SET_V6: &str = "dns_v6";

/// The networks inside internal ranges that may be reached anyway: those
/// the policy names, the gateway's (see `ranges`).
pub(crate) const NAMED_INTERNAL_V4: &str = "named_internal_v4";
pub(crate) const NAMED_INTERNAL_V6: &str = "named_internal_v6";

/// An `nft -f` script that replaces the policy atomically: the
/// `allow_v4`/`allow_v6` sets (the policy's networks, plus the gateway's
/// address when it is not on the host's loopback), the DNS-learned sets
/// (emptied: what the resolver learned under the old policy is forgotten)
/// and the `session_policy` chain. Every value interpolated is a typed
/// [`Cidr`], so nothing from a session can inject rules.
pub(crate) fn policy_script(policy: &Parsed, always: &[Cidr]) -> String {
    let mut s = format!(
        "table inet {TABLE} {{
\tset {DNS_SET_V4} {{ type ipv4_addr; flags timeout; }}
\tset {DNS_SET_V6} {{ type ipv6_addr; flags timeout; }}
\tset {NAMED_INTERNAL_V4} {{ type ipv4_addr; flags interval; }}
\tset {NAMED_INTERNAL_V6} {{ type ipv6_addr; flags interval; }}
}}
flush chain inet {TABLE} session_policy
flush set inet {TABLE} allow_v4
flush set inet {TABLE} allow_v6
flush set inet {TABLE} {DNS_SET_V4}
flush set inet {TABLE} {DNS_SET_V6}
flush set inet {TABLE} {NAMED_INTERNAL_V4}
flush set inet {TABLE} {NAMED_INTERNAL_V6}
"
    );
    add_elements(
        &mut s,
        [NAMED_INTERNAL_V4, NAMED_INTERNAL_V6],
        &minimal(&super::ranges::named_by(policy, always)),
    );
    if !policy.open {
        let nets: Vec<Cidr> = policy.nets.iter().chain(always).copied().collect();
        add_elements(&mut s, ["allow_v4", "allow_v6"], &minimal(&nets));
    }
    let _ = writeln!(s, "table inet {TABLE} {{\n\tchain session_policy {{");
    for rule in policy_rules(policy) {
        let _ = writeln!(s, "\t\t{rule}");
    }
    s.push_str("\t}\n}\n");
    s
}

/// Adds `nets` to the IPv4 and the IPv6 set of `sets`.
fn add_elements(s: &mut String, sets: [&str; 2], nets: &[Cidr]) {
    for (set, v6) in [(sets[0], false), (sets[1], true)] {
        let elements: Vec<String> = nets
            .iter()
            .filter(|c| c.addr.is_ipv6() == v6)
            .map(Cidr::to_string)
            .collect();
        if !elements.is_empty() {
            let _ = writeln!(
                s,
                "add element inet {TABLE} {set} {{ {} }}",
                elements.join(", ")
            );
        }
    }
}

/// An `nft -f` script that lets the sandbox reach the internal addresses
/// the gateway's name resolved to (until the policy is next applied).
pub(crate) fn named_internal_script(addrs: &[IpAddr]) -> Option<String> {
    let nets: Vec<Cidr> = addrs.iter().copied().map(Cidr::host).collect();
    let mut s = String::new();
    add_elements(
        &mut s,
        [NAMED_INTERNAL_V4, NAMED_INTERNAL_V6],
        &minimal(&nets),
    );
    (!s.is_empty()).then_some(s)
}

/// `nets` without the ones another contains (an interval set refuses
/// overlapping elements), sorted.
fn minimal(nets: &[Cidr]) -> Vec<Cidr> {
    let mut out: Vec<Cidr> = nets
        .iter()
        .filter(|c| {
            !nets
                .iter()
                .any(|o| o != *c && o.len <= c.len && o.contains(c.addr))
        })
        .copied()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The rules of the `session_policy` chain: none (accept) for a disabled
/// policy; else the allowed sets return to the output chain (which
/// accepts) and everything else is refused.
fn policy_rules(policy: &Parsed) -> Vec<String> {
    if policy.open {
        return Vec::new();
    }
    vec![
        "ip daddr @allow_v4 return".into(),
        "ip6 daddr @allow_v6 return".into(),
        format!("ip daddr @{DNS_SET_V4} return"),
        format!("ip6 daddr @{DNS_SET_V6} return"),
        "goto refuse".into(),
    ]
}

/// An `nft -f` script adding resolver answers to the DNS sets, each for
/// `ttl` seconds (bounded as `dns_budget` bounds them).
pub(crate) fn dns_elements_script(answers: &[(IpAddr, u32)]) -> Option<String> {
    let mut s = String::new();
    for (addr, ttl) in answers {
        let set = if addr.is_ipv6() {
            DNS_SET_V6
        } else {
            DNS_SET_V4
        };
        let ttl = super::dns_budget::bounded_ttl(*ttl);
        let _ = writeln!(
            s,
            "add element inet {TABLE} {set} {{ {addr} timeout {ttl}s }}"
        );
    }
    (!s.is_empty()).then_some(s)
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
