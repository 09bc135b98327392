//! Devin's network policy as Modal's `NetworkAccess` arguments.
//!
//! The policy is parsed once by [`sandbox::policy::parse`]; this file only
//! says how Modal expresses the result, and what it cannot.

use std::net::IpAddr;

use common::NetworkPolicy;
use sandbox::policy::{
    Cidr, Gateway, HostPattern, Unsupported, cidr_text, dedup, gateway_destination, parse, rejected,
};

/// Modal's `Sandbox.create` network arguments: `block_network`,
/// `outbound_cidr_allowlist` and `outbound_domain_allowlist` (Modal's
/// `NetworkAccess`). Modal documents `*.` prefixes in its domain allow-list
/// but not whether they also match the bare domain; the parsed policy
/// itself never allows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Controls {
    /// No network at all.
    pub block_network: bool,
    /// `None` = unrestricted; `Some` = only these CIDRs and
    /// [`Controls::domain_allowlist`] are reachable.
    pub cidr_allowlist: Option<Vec<String>>,
    /// Hostnames (`name` or `*.name`) reachable when restricted.
    pub domain_allowlist: Vec<String>,
    /// Rules left out because Modal cannot express them.
    pub unsupported: Vec<Unsupported>,
}

/// Modal's controls for `policy`; the gateway is always reachable.
pub(crate) fn controls(policy: &NetworkPolicy, gateway: Option<&Gateway>) -> Controls {
    let parsed = parse(policy);
    let mut out = Controls::default();
    out.unsupported.extend(rejected(&parsed));
    if parsed.open {
        return out;
    }
    let mut cidrs: Vec<String> = Vec::new();
    let mut domains: Vec<String> = Vec::new();
    if let Some(g) = gateway {
        match g.host.parse::<IpAddr>() {
            Ok(ip) => cidrs.push(cidr_text(&Cidr::host(ip))),
            Err(_) => domains.push(gateway_destination(g)),
        }
    }
    domains.extend(parsed.hosts.iter().map(HostPattern::to_string));
    cidrs.extend(parsed.nets.iter().map(cidr_text));
    dedup(&mut cidrs);
    dedup(&mut domains);
    if cidrs.is_empty() && domains.is_empty() {
        // An empty allow-list is not "no restriction": block everything.
        out.block_network = true;
    } else {
        out.cidr_allowlist = Some(cidrs);
        out.domain_allowlist = domains;
    }
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
        assert_eq!(controls(&p, Some(&gw("gw.example"))), Controls::default());
    }

    #[test]
    fn enabled_and_empty_allows_only_the_gateway() {
        let p = policy(true, vec![]);
        let m = controls(&p, Some(&gw("203.0.113.5")));
        assert!(!m.block_network);
        assert_eq!(m.cidr_allowlist, Some(vec!["203.0.113.5/32".to_owned()]));
        assert!(m.domain_allowlist.is_empty());
        let m = controls(&p, Some(&gw("2001:db8::5")));
        assert_eq!(m.cidr_allowlist, Some(vec!["2001:db8::5/128".to_owned()]));

        // A named gateway goes in the domain allow-list.
        let m = controls(&p, Some(&gw("GW.example.")));
        assert!(!m.block_network);
        assert_eq!(m.cidr_allowlist, Some(Vec::new()));
        assert_eq!(m.domain_allowlist, ["gw.example"]);
        assert!(m.unsupported.is_empty());

        // No gateway at all: nothing is reachable.
        assert!(controls(&p, None).block_network);
    }

    #[test]
    fn enabled_policy_maps_rules_and_reports_what_cannot_be_expressed() {
        let m = controls(&mixed(), Some(&gw("203.0.113.5")));
        assert!(!m.block_network);
        assert_eq!(
            m.cidr_allowlist.unwrap(),
            ["203.0.113.5/32", "198.51.100.0/24", "2001:db8::/48"]
        );
        assert_eq!(m.domain_allowlist, ["api.openai.com", "*.github.com"]);
        let rules: Vec<&str> = m.unsupported.iter().map(|u| u.rule.as_str()).collect();
        assert_eq!(
            rules,
            [r#"{"cidr":"0.0.0.0/0"}"#, r#"{"ipv4":"not an address"}"#]
        );
    }

    #[test]
    fn unknown_rules_alone_allow_nothing() {
        let p = policy(true, vec![AllowRule::Unknown(json!({"everything": true}))]);
        let m = controls(&p, None);
        assert!(m.block_network);
        assert_eq!(m.unsupported.len(), 1);
    }
}
