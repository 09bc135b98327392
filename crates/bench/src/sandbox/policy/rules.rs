//! The enabled network policy the `--policy` figures measure: a long
//! allow list that names no real host.

use fleet::{AllowRule, NetworkPolicy};

/// Entries of the enabled policy.
pub(super) const ALLOW_ENTRIES: usize = 50;

/// Half hostname globs, half networks, all in TEST-NET ranges and the
/// `.test` TLD (RFC 2606/5737): the enabled policy costs what a long real
/// list costs (set elements, resolver patterns) without naming a real
/// host. The networks cover `super::world::SINK`.
pub(super) fn allow_list() -> Vec<AllowRule> {
    let hosts = ALLOW_ENTRIES / 2;
    let mut rules: Vec<AllowRule> = (0..hosts)
        .map(|i| AllowRule::Hostname(format!("*.example-{i}.test")))
        .collect();
    for i in 0..ALLOW_ENTRIES - hosts {
        rules.push(AllowRule::Ipv4(if i % 2 == 0 {
            // 198.51.100.0/28, .16/28, ... .192/28: /28s across the range.
            format!("198.51.100.{}/28", (i / 2) * 16)
        } else {
            format!("203.0.113.{}", i)
        }));
    }
    rules
}

/// A policy that is on, with [`allow_list`].
pub(super) fn enabled() -> NetworkPolicy {
    NetworkPolicy {
        enabled: true,
        allow: allow_list(),
    }
}
