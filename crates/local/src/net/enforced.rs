//! The policy as the namespace enforces it: validated, with the sandbox's
//! gateway (its host, as [`super::SandboxNet::gateway_host`]) always
//! allowed, and what the resolver needs of it.

use std::net::IpAddr;

use sandbox::policy::{Cidr, HostPattern, Parsed, parse};

use super::{dns, ranges};

/// The policy as enforced: validated, with the gateway added (its name to
/// the names, or its address to the returned always-allowed networks).
pub(super) fn enforced(
    gateway_host: Option<&str>,
    policy: &common::NetworkPolicy,
) -> (Parsed, Vec<Cidr>) {
    let mut parsed = parse(policy);
    let mut always = Vec::new();
    if let Some(host) = gateway_host {
        match host.parse::<IpAddr>() {
            Ok(ip) => always.push(Cidr::host(ip)),
            Err(_) => parsed.hosts.extend(HostPattern::parse(host)),
        }
    }
    (parsed, always)
}

/// What the resolver needs of the enforced policy.
pub(super) fn resolver_policy(
    gateway_host: Option<&str>,
    parsed: Parsed,
    always: &[Cidr],
) -> dns::ResolverPolicy {
    dns::ResolverPolicy {
        named_internal: ranges::named_by(&parsed, always),
        gateway_name: gateway_host
            .filter(|h| h.parse::<IpAddr>().is_err())
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase()),
        parsed,
    }
}
