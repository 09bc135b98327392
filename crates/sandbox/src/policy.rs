//! `spec.network_policy`, validated, and mapped onto what each backend can
//! enforce. Pure functions: no I/O.
//!
//! Every rule comes from the server, so each is parsed into a typed value
//! ([`Rule`]) before anything uses it; a rule that does not parse, and an
//! [`common::AllowRule::Unknown`] shape, allows nothing and is reported.
//!
//! The cloud mappings ([`tensorlake`], [`modal`]) fail closed: what a provider
//! cannot express is left out (so the sandbox reaches less, never more) and
//! listed in `unsupported`, for the caller to decide whether to go on.
//! The gateway the session needs is always allowed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A hostname rule: `api.github.com` (that name only) or `*.github.com`
/// (every name below `github.com`, at any depth, but not `github.com`
/// itself). Stored lowercase, without a trailing dot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    /// That name only.
    Exact(String),
    /// The suffix without the `*.`: `github.com`.
    Subdomains(String),
}

impl HostPattern {
    /// Parses `name` or `*.name`; any other wildcard (`*`, `a*.b`, `*.com`
    /// with a single label after it is allowed, `*` alone is not) is refused.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim_end_matches('.').to_ascii_lowercase();
        if let Some(suffix) = text.strip_prefix("*.") {
            valid_hostname(suffix).then(|| Self::Subdomains(suffix.to_owned()))
        } else {
            valid_hostname(&text).then_some(Self::Exact(text))
        }
    }

    /// Whether the DNS name `name` (any case, trailing dot or not) matches.
    pub fn matches(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match self {
            Self::Exact(n) => name == *n,
            Self::Subdomains(suffix) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }

    /// Whether it is a `*.` pattern.
    pub fn is_glob(&self) -> bool {
        matches!(self, Self::Subdomains(_))
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(n) => f.write_str(n),
            Self::Subdomains(s) => write!(f, "*.{s}"),
        }
    }
}

/// Letters, digits, `-` and `_` in dot-separated labels of 1 to 63
/// characters, 253 at most in all, no label starting or ending with `-`.
fn valid_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// An address range; host bits are cleared, so `10.1.2.3/8` is `10.0.0.0/8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr {
    /// The first address of the range.
    pub addr: IpAddr,
    /// The prefix length.
    pub len: u8,
}

impl Cidr {
    /// `a.b.c.d`, `a.b.c.d/n`, `x::y`, `x::y/n` (`v6` picks the family the
    /// rule claims; an address of the other family is refused).
    pub fn parse(text: &str, v6: bool) -> Option<Self> {
        let (addr, len) = match text.trim().split_once('/') {
            Some((a, l)) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => {
                (a, Some(l.parse::<u8>().ok()?))
            }
            Some(_) => return None,
            None => (text.trim(), None),
        };
        let addr: IpAddr = addr.parse().ok()?;
        let max = if addr.is_ipv6() { 128 } else { 32 };
        if addr.is_ipv6() != v6 {
            return None;
        }
        let len = len.unwrap_or(max);
        if len > max {
            return None;
        }
        let addr = match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Some(Self { addr, len })
    }

    /// The network of the one address `addr`.
    pub fn host(addr: IpAddr) -> Self {
        Self {
            addr,
            len: if addr.is_ipv6() { 128 } else { 32 },
        }
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// One validated allow rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// Names matching a pattern.
    Host(HostPattern),
    /// Addresses in a range.
    Net(Cidr),
}

/// A rule that allows nothing, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The rule as the server sent it (JSON).
    pub rule: String,
    /// Why it allows nothing.
    pub reason: &'static str,
}

/// A policy, validated. `enabled: false` is [`Parsed::open`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Whether egress is open (the policy is disabled).
    pub open: bool,
    /// The names allowed.
    pub hosts: Vec<HostPattern>,
    /// The networks allowed.
    pub nets: Vec<Cidr>,
    /// Rules that allow nothing: unknown shapes and values that do not parse.
    pub rejected: Vec<Rejected>,
}

impl Parsed {
    /// Whether `name` is allowed by a hostname rule (always, when open).
    pub fn allows_name(&self, name: &str) -> bool {
        self.open || self.hosts.iter().any(|h| h.matches(name))
    }
}

/// Validates `policy`. Duplicates are removed; order is kept otherwise.
pub fn parse(policy: &common::NetworkPolicy) -> Parsed {
    let mut out = Parsed {
        open: !policy.enabled,
        ..Parsed::default()
    };
    for rule in &policy.allow {
        let json = || serde_json::to_string(rule).unwrap_or_default();
        let parsed = match rule {
            common::AllowRule::Hostname(h) => HostPattern::parse(h)
                .map(Rule::Host)
                .ok_or("not a hostname or *.hostname"),
            common::AllowRule::Ipv4(a) => Cidr::parse(a, false)
                .map(Rule::Net)
                .ok_or("not an IPv4 address or CIDR"),
            common::AllowRule::Ipv6(a) => Cidr::parse(a, true)
                .map(Rule::Net)
                .ok_or("not an IPv6 address or CIDR"),
            common::AllowRule::Unknown(_) => Err("unknown rule shape"),
        };
        match parsed {
            Ok(Rule::Host(h)) if !out.hosts.contains(&h) => out.hosts.push(h),
            Ok(Rule::Net(n)) if !out.nets.contains(&n) => out.nets.push(n),
            Ok(_) => {}
            Err(reason) => out.rejected.push(Rejected {
                rule: json(),
                reason,
            }),
        }
    }
    out
}

/// The gateway the session must reach whatever the policy says: its host
/// (a name or an address literal, IPv6 without brackets) and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gateway {
    /// A name or an address literal (IPv6 without brackets).
    pub host: String,
    /// The port, when the URL names one.
    pub port: Option<u16>,
}

impl Gateway {
    /// The gateway of a claim's gateway URL (its port, or the scheme's
    /// default); `None` when it does not parse or has no host.
    pub fn from_url(url: &str) -> Option<Self> {
        let url = url::Url::parse(url).ok()?;
        let host = match url.host()? {
            url::Host::Domain(d) => d.to_owned(),
            url::Host::Ipv4(a) => a.to_string(),
            url::Host::Ipv6(a) => a.to_string(),
        };
        Some(Self {
            host,
            port: url.port_or_known_default(),
        })
    }
}

/// Something a provider cannot express, left out of its controls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The rule, as the server sent it.
    pub rule: String,
    /// Why the provider leaves it out.
    pub reason: String,
}

/// The rules `parse` refused, as a provider reports them.
pub fn rejected(parsed: &Parsed) -> impl Iterator<Item = Unsupported> + '_ {
    parsed.rejected.iter().map(|r| Unsupported {
        rule: r.rule.clone(),
        reason: format!("allows nothing: {}", r.reason),
    })
}

/// The gateway as a destination a provider allows: an address, or a
/// lower-case name without the trailing dot.
pub fn gateway_destination(g: &Gateway) -> String {
    match g.host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => g.host.trim_end_matches('.').to_ascii_lowercase(),
    }
}

/// `c` as `addr/len`.
pub fn cidr_text(c: &Cidr) -> String {
    c.to_string()
}

/// Drops repeated entries, keeping the first of each.
pub fn dedup(list: &mut Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    list.retain(|s| seen.insert(s.clone()));
}

/// Policies and a gateway the backends' mapping tests share, so every
/// backend is checked against the same inputs.
pub mod examples {
    use common::{AllowRule, NetworkPolicy};

    use super::Gateway;

    /// A policy with these rules.
    pub fn policy(enabled: bool, allow: Vec<AllowRule>) -> NetworkPolicy {
        NetworkPolicy { enabled, allow }
    }
    /// A hostname rule.
    pub fn host(h: &str) -> AllowRule {
        AllowRule::Hostname(h.into())
    }
    /// An IPv4 rule.
    pub fn v4(a: &str) -> AllowRule {
        AllowRule::Ipv4(a.into())
    }
    /// An IPv6 rule.
    pub fn v6(a: &str) -> AllowRule {
        AllowRule::Ipv6(a.into())
    }
    /// A gateway on port 443.
    pub fn gateway(h: &str) -> Gateway {
        Gateway {
            host: h.into(),
            port: Some(443),
        }
    }

    /// One of each: exact and glob hostnames, an IPv4 network given twice
    /// (once with host bits), an IPv6 network, an unknown rule shape and an
    /// invalid address.
    pub fn mixed() -> NetworkPolicy {
        policy(
            true,
            vec![
                host("api.openai.com"),
                host("*.github.com"),
                v4("198.51.100.0/24"),
                v4("198.51.100.9/24"),
                v6("2001:db8::/48"),
                AllowRule::Unknown(serde_json::json!({"cidr": "0.0.0.0/0"})),
                v4("not an address"),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::examples::*;
    use super::*;
    use common::AllowRule;
    use serde_json::json;

    #[test]
    fn gateway_host_and_port_come_from_the_url() {
        let g = Gateway::from_url("wss://203.0.113.5:8443/ws").unwrap();
        assert_eq!((g.host.as_str(), g.port), ("203.0.113.5", Some(8443)));
        let g = Gateway::from_url("https://[2001:db8::5]/x").unwrap();
        assert_eq!((g.host.as_str(), g.port), ("2001:db8::5", Some(443)));
        assert!(Gateway::from_url("not a url").is_none());
    }

    #[test]
    fn globs_match_subdomains_at_any_depth_but_not_the_apex_or_lookalikes() {
        let p = HostPattern::parse("*.github.com").unwrap();
        assert!(p.is_glob());
        assert!(p.matches("api.github.com"));
        assert!(p.matches("a.b.github.com"));
        assert!(p.matches("API.GitHub.com."));
        assert!(!p.matches("github.com"));
        assert!(!p.matches("evilgithub.com"));
        assert!(!p.matches(".github.com"));
        assert!(!p.matches("github.com.evil.org"));
        let exact = HostPattern::parse("GitHub.com.").unwrap();
        assert_eq!(exact, HostPattern::Exact("github.com".into()));
        assert!(exact.matches("github.com"));
        assert!(!exact.matches("api.github.com"));
        for bad in [
            "*",
            "*.",
            "a*.b.com",
            "*.*.com",
            "",
            "a..b",
            "-a.com",
            "a b.com",
            "a/b",
            "10.0.0.0/8",
            "é.com",
        ] {
            assert_eq!(HostPattern::parse(bad), None, "{bad:?}");
        }
        assert!(HostPattern::parse(&"a.".repeat(128)).is_none());
    }

    #[test]
    fn cidrs_parse_normalize_and_check_family() {
        let c = Cidr::parse("10.1.2.3/8", false).unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!(c.contains("10.200.0.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::a01:203".parse().unwrap()));
        assert_eq!(
            Cidr::parse("198.51.100.7", false).unwrap().to_string(),
            "198.51.100.7/32"
        );
        assert_eq!(
            Cidr::parse("0.0.0.0/0", false).unwrap().to_string(),
            "0.0.0.0/0"
        );
        assert_eq!(
            Cidr::parse("2001:DB8::1/32", true).unwrap().to_string(),
            "2001:db8::/32"
        );
        assert_eq!(
            Cidr::parse("2001:db8::1", true).unwrap().to_string(),
            "2001:db8::1/128"
        );
        assert_eq!(Cidr::parse("::/0", true).unwrap().to_string(), "::/0");
        for (bad, v6) in [
            ("10.0.0.0/33", false),
            ("10.0.0.0/", false),
            ("10.0.0.0/-1", false),
            ("10.0.0.0/8/8", false),
            ("fd00::/8", false),
            ("10.0.0.1", true),
            ("fd00::/129", true),
            ("example.com", false),
            ("", false),
        ] {
            assert_eq!(Cidr::parse(bad, v6), None, "{bad:?}");
        }
    }

    #[test]
    fn parse_sorts_rules_and_rejects_unknown_and_invalid() {
        let p = parse(&policy(
            true,
            vec![
                host("*.github.com"),
                host("*.GitHub.com"),
                v4("10.0.0.0/8"),
                v6("fd00::/8"),
                v4("fd00::1"),
                host("*"),
                AllowRule::Unknown(json!({"port": 22})),
            ],
        ));
        assert!(!p.open);
        assert_eq!(p.hosts, [HostPattern::Subdomains("github.com".into())]);
        assert_eq!(
            p.nets.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            ["10.0.0.0/8", "fd00::/8"]
        );
        assert_eq!(p.rejected.len(), 3);
        assert_eq!(p.rejected[2].rule, r#"{"port":22}"#);
        assert_eq!(p.rejected[2].reason, "unknown rule shape");
        assert!(p.allows_name("x.github.com"));
        assert!(!p.allows_name("github.com"));
        assert!(parse(&policy(false, vec![])).allows_name("anything.example"));
    }

    #[test]
    fn unknown_rules_alone_allow_nothing() {
        let p = policy(true, vec![AllowRule::Unknown(json!({"everything": true}))]);
        assert!(parse(&p).hosts.is_empty() && parse(&p).nets.is_empty());
        assert_eq!(rejected(&parse(&p)).count(), 1);
    }
}
