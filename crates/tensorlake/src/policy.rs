//! Devin's network policy as Tensorlake's sandbox-create network fields.
//!
//! The policy is parsed once by [`sandbox::policy::parse`]; this file only
//! says how Tensorlake expresses the result, and what it cannot.

use common::NetworkPolicy;
use sandbox::policy::{
    Gateway, HostPattern, Unsupported, cidr_text, dedup, gateway_destination, parse, rejected,
};

/// Tensorlake's sandbox-create network fields (`allow_internet_access`,
/// `allow_out`, `deny_out`). `allow_out`, when not empty, is the complete
/// list of reachable destinations (hostnames, addresses, CIDRs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Controls {
    /// `allow_internet_access`.
    pub allow_internet_access: bool,
    /// `allow_out`: the destinations reachable, when not empty.
    pub allow_out: Vec<String>,
    /// `deny_out`: destinations refused.
    pub deny_out: Vec<String>,
    /// The parts of the policy Tensorlake cannot enforce.
    pub unsupported: Vec<Unsupported>,
}

/// Tensorlake's controls for `policy`. Glob hostnames are not documented
/// as supported in `allow_out`, so they are `unsupported` (left out).
pub(crate) fn controls(policy: &NetworkPolicy, gateway: Option<&Gateway>) -> Controls {
    let parsed = parse(policy);
    let mut out = Controls {
        allow_internet_access: true,
        ..Controls::default()
    };
    out.unsupported.extend(rejected(&parsed));
    if parsed.open {
        return out;
    }
    if let Some(g) = gateway {
        out.allow_out.push(gateway_destination(g));
    }
    for host in &parsed.hosts {
        match host {
            HostPattern::Exact(n) => out.allow_out.push(n.clone()),
            HostPattern::Subdomains(_) => out.unsupported.push(Unsupported {
                rule: host.to_string(),
                reason: "Tensorlake's allow_out takes exact hostnames, not globs".into(),
            }),
        }
    }
    out.allow_out.extend(parsed.nets.iter().map(cidr_text));
    if out.allow_out.is_empty() {
        // Nothing at all may be reached (no gateway was given).
        out.allow_internet_access = false;
    }
    dedup(&mut out.allow_out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::AllowRule;
    use sandbox::policy::examples::{gateway as gw, host, mixed, policy};
    use serde_json::json;

    #[test]
    fn disabled_policy_is_open_everywhere() {
        let p = policy(false, vec![host("github.com")]);
        let t = controls(&p, Some(&gw("gw.example")));
        assert!(t.allow_internet_access);
        assert!(t.allow_out.is_empty() && t.deny_out.is_empty() && t.unsupported.is_empty());
    }

    #[test]
    fn enabled_and_empty_allows_only_the_gateway() {
        let p = policy(true, vec![]);
        let t = controls(&p, Some(&gw("GW.example.")));
        assert!(t.allow_internet_access);
        assert_eq!(t.allow_out, ["gw.example"]);
        assert!(t.unsupported.is_empty());
        // No gateway at all: nothing is reachable.
        assert!(!controls(&p, None).allow_internet_access);
    }

    #[test]
    fn enabled_policy_maps_rules_and_reports_what_cannot_be_expressed() {
        let t = controls(&mixed(), Some(&gw("gw.example")));
        assert!(t.allow_internet_access);
        assert_eq!(
            t.allow_out,
            [
                "gw.example",
                "api.openai.com",
                "198.51.100.0/24",
                "2001:db8::/48"
            ]
        );
        let rules: Vec<&str> = t.unsupported.iter().map(|u| u.rule.as_str()).collect();
        assert_eq!(
            rules,
            [
                r#"{"cidr":"0.0.0.0/0"}"#,
                r#"{"ipv4":"not an address"}"#,
                "*.github.com"
            ]
        );
    }

    #[test]
    fn unknown_rules_alone_allow_nothing_but_the_gateway() {
        let p = policy(true, vec![AllowRule::Unknown(json!({"everything": true}))]);
        let t = controls(&p, Some(&gw("gw.example")));
        assert_eq!(t.allow_out, ["gw.example"]);
        assert_eq!(t.unsupported.len(), 1);
    }
}
