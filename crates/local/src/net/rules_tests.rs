//! The rulesets as text: what each policy and each base setting puts in.

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
    assert!(s.contains(
        "set sandbox_nets_v4 { type ipv4_addr; flags interval; elements = { 10.213.0.0/16 }; }"
    ));
    assert!(s.contains("elements = { fd00:ec2::254/128, fe80::/10 }"));
    assert!(
        s.contains("set host_addrs_v4 { type ipv4_addr; elements = { 10.1.2.3, 192.0.2.2 }; }")
    );
    assert!(s.contains("set allow_v4 { type ipv4_addr; flags interval; }"));
    assert!(s.contains("10.0.0.0/8, 100.64.0.0/10"), "{s}");
    assert!(s.contains("168.63.129.16/32"));
    assert!(s.contains("fc00::/7"));
    // Internal ranges are refused before any policy can open them.
    let internal = s
        .find("ip daddr @internal_v4 ip daddr != @named_internal_v4 goto refuse")
        .unwrap();
    assert!(internal < s.find("jump session_policy").unwrap());
    // The gateway port is accepted before the rest of the host's loopback
    // is refused, and the policy comes after every always-on rule.
    let accept = s.find("tcp dport @gateway_ports accept").unwrap();
    let refuse = s.find("@host_loopback_v4 goto refuse").unwrap();
    let policy = s.find("jump session_policy").unwrap();
    assert!(accept < refuse && refuse < policy);
    assert!(s.rfind("goto refuse").unwrap() < policy);
}

#[test]
fn tracked_and_new_connections_are_limited_per_sandbox() {
    let s = base_ruleset(&rules());
    assert!(s.contains("set conns_v4 { type ipv4_addr; size 16; flags dynamic; }"));
    assert!(s.contains(&format!(
        "ct state new add @conns_v4 {{ ip saddr ct count over {MAX_CONNECTIONS} }} goto refuse"
    )));
    assert!(s.contains(&format!(
        "ct state new limit rate over {NEW_CONNECTIONS_PER_SEC}/second"
    )));
    // Counted before anything is accepted but the sandbox's own
    // loopback and flows already open.
    let limit = s.find("ct count over").unwrap();
    assert!(limit < s.find("@gateway_ports accept").unwrap());
}

#[test]
fn no_gateway_port_leaves_the_set_empty() {
    let s = base_ruleset(&BaseRules {
        gateway_port: None,
        ..rules()
    });
    assert!(s.contains("set gateway_ports { type inet_service; }"));
}

fn parsed(enabled: bool, allow: Vec<common::AllowRule>) -> Parsed {
    sandbox::policy::parse(&common::NetworkPolicy { enabled, allow })
}

#[test]
fn a_wholesale_network_names_no_internal_range_and_an_open_policy_names_only_the_gateway() {
    use common::AllowRule::*;
    let s = policy_script(&parsed(true, vec![Ipv4("0.0.0.0/0".into())]), &[]);
    assert!(
        !s.contains("add element inet garrison named_internal"),
        "{s}"
    );
    let gateway = Cidr::parse("10.9.8.7", false).unwrap();
    let s = policy_script(&parsed(false, vec![Ipv4("10.1.0.0/16".into())]), &[gateway]);
    assert!(
        s.contains("add element inet garrison named_internal_v4 { 10.9.8.7/32 }"),
        "{s}"
    );
    assert!(!s.contains("10.1.0.0/16"), "{s}");
}

#[test]
fn disabled_policy_leaves_the_chain_empty() {
    let s = policy_script(
        &parsed(false, vec![common::AllowRule::Ipv4("10.0.0.0/8".into())]),
        &[],
    );
    assert!(s.contains("flush chain inet garrison session_policy\n"));
    assert!(!s.contains("add element"));
    assert!(s.ends_with("\tchain session_policy {\n\t}\n}\n"), "{s}");
}

#[test]
fn enabled_policy_fills_the_sets_and_refuses_the_rest() {
    use common::AllowRule::*;
    let gateway = Cidr::parse("203.0.113.7", false).unwrap();
    let s = policy_script(
        &parsed(
            true,
            vec![
                Ipv4("10.1.0.0/16".into()),
                Ipv4("10.0.0.0/8".into()),
                Ipv4("203.0.113.0/24".into()),
                Ipv6("2001:db8::/32".into()),
                Hostname("*.github.com".into()),
                Unknown(serde_json::json!({"any": true})),
            ],
        ),
        &[gateway],
    );
    assert!(
        s.contains("add element inet garrison allow_v4 { 10.0.0.0/8, 203.0.113.0/24 }"),
        "{s}"
    );
    assert!(s.contains("add element inet garrison allow_v6 { 2001:db8::/32 }"));
    // 10.0.0.0/8 names the internal range; 203.0.113.0/24 is not one.
    assert!(
        s.contains("add element inet garrison named_internal_v4 { 10.0.0.0/8 }"),
        "{s}"
    );
    assert!(s.contains("flush set inet garrison named_internal_v4"));
    assert!(s.contains("set dns_v4 { type ipv4_addr; flags timeout; }"));
    assert!(s.contains("flush set inet garrison dns_v4"));
    let chain = &s[s.rfind("chain session_policy").unwrap()..];
    assert!(chain.contains("ip daddr @allow_v4 return\n\t\tip6 daddr @allow_v6 return\n\t\tip daddr @dns_v4 return\n\t\tip6 daddr @dns_v6 return\n\t\tgoto refuse\n"), "{chain}");

    // Enabled and empty: only the always-allowed networks.
    let s = policy_script(&parsed(true, vec![]), &[]);
    assert!(!s.contains("add element"));
    assert!(s.contains("goto refuse"));
}

#[test]
fn dns_answers_get_bounded_timeouts() {
    let s = dns_elements_script(&[
        ("198.51.100.10".parse().unwrap(), 60),
        ("2001:db8::1".parse().unwrap(), 0),
        ("198.51.100.11".parse().unwrap(), u32::MAX),
    ])
    .unwrap();
    assert_eq!(
        s,
        "add element inet garrison dns_v4 { 198.51.100.10 timeout 60s }\n\
         add element inet garrison dns_v6 { 2001:db8::1 timeout 5s }\n\
         add element inet garrison dns_v4 { 198.51.100.11 timeout 300s }\n"
    );
    assert_eq!(dns_elements_script(&[]), None);
}
