//! Address ranges a sandbox reaches only when a policy names them.
//!
//! Traffic leaves a sandbox masqueraded as the host, so an open policy (or
//! a broad CIDR) would hand the agent the host's place on its networks:
//! private LANs, carrier-grade NAT (where other clouds keep metadata
//! services, e.g. 100.100.100.200), Azure's wire server, unique-local IPv6,
//! multicast. These are refused unless the policy names a network inside
//! one of them (`10.20.0.0/16` names part of `10.0.0.0/8`; `0.0.0.0/0`
//! covers it wholesale and names nothing), or the gateway lives there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sandbox::policy::{Cidr, Parsed};

/// IPv4 ranges that are the host's surroundings rather than the internet.
pub(crate) const INTERNAL_V4: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(10, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(127, 0, 0, 0), 8),
    (Ipv4Addr::new(168, 63, 129, 16), 32),
    (Ipv4Addr::new(172, 16, 0, 0), 12),
    (Ipv4Addr::new(192, 0, 0, 0), 24),
    (Ipv4Addr::new(192, 168, 0, 0), 16),
    (Ipv4Addr::new(198, 18, 0, 0), 15),
    (Ipv4Addr::new(224, 0, 0, 0), 4),
    (Ipv4Addr::new(240, 0, 0, 0), 4),
];

/// See [`INTERNAL_V4`]: unique-local, site-local, multicast, IPv4-mapped
/// and loopback.
pub(crate) const INTERNAL_V6: &[(Ipv6Addr, u8)] = &[
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 128),
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
];

/// Every internal range as a [`Cidr`].
pub(crate) fn internal() -> Vec<Cidr> {
    cidrs(INTERNAL_V4, INTERNAL_V6)
}

/// Address tables (as the nft scripts spell them) as networks.
pub(crate) fn cidrs(v4: &[(Ipv4Addr, u8)], v6: &[(Ipv6Addr, u8)]) -> Vec<Cidr> {
    let v4 = v4.iter().map(|(a, l)| Cidr {
        addr: IpAddr::V4(*a),
        len: *l,
    });
    let v6 = v6.iter().map(|(a, l)| Cidr {
        addr: IpAddr::V6(*a),
        len: *l,
    });
    v4.chain(v6).collect()
}

/// Whether `ip` is in an internal range.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    ip.is_unspecified() || internal().iter().any(|r| r.contains(ip))
}

/// The networks of `nets` that name internal addresses: those lying inside
/// an internal range. A network wider than the range it overlaps names
/// none of it.
pub(crate) fn named_internal(nets: &[Cidr]) -> Vec<Cidr> {
    let ranges = internal();
    nets.iter()
        .filter(|net| {
            ranges.iter().any(|r| {
                r.addr.is_ipv6() == net.addr.is_ipv6() && net.len >= r.len && r.contains(net.addr)
            })
        })
        .copied()
        .collect()
}

/// The internal networks the enforced policy names: its networks (when it
/// is enabled; a disabled policy names none) and the always-allowed ones
/// (the gateway's address), where they lie inside internal ranges.
pub(crate) fn named_by(policy: &Parsed, always: &[Cidr]) -> Vec<Cidr> {
    let nets: Vec<Cidr> = if policy.open {
        always.to_vec()
    } else {
        policy.nets.iter().chain(always).copied().collect()
    };
    named_internal(&nets)
}

/// Whether a resolver answer `ip` is refused: internal and not inside a
/// named network, or never reachable at all (link-local, metadata).
pub(crate) fn refused_answer(ip: IpAddr, named: &[Cidr]) -> bool {
    let never = always_blocked().iter().any(|c| c.contains(ip));
    never || (is_internal(ip) && !named.iter().any(|n| n.contains(ip)))
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

/// [`BLOCKED_V4`] and [`BLOCKED_V6`] as networks.
pub(crate) fn always_blocked() -> Vec<Cidr> {
    cidrs(BLOCKED_V4, BLOCKED_V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        Cidr::parse(text, text.contains(':')).unwrap()
    }

    #[test]
    fn private_cgnat_metadata_and_unique_local_are_internal() {
        for ip in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "168.63.129.16",
            "127.0.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "fd12::1",
            "fc00::1",
            "ff02::1",
            "::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "203.0.113.5",
            "2001:db8::1",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn only_networks_inside_an_internal_range_name_it() {
        let nets = [
            cidr("0.0.0.0/0"),
            cidr("10.0.0.0/7"),
            cidr("10.0.0.0/8"),
            cidr("10.20.0.0/16"),
            cidr("203.0.113.0/24"),
            cidr("::/0"),
            cidr("fd00:1::/64"),
        ];
        assert_eq!(
            named_internal(&nets),
            vec![
                cidr("10.0.0.0/8"),
                cidr("10.20.0.0/16"),
                cidr("fd00:1::/64")
            ]
        );
    }

    #[test]
    fn answers_in_refused_ranges_are_dropped_unless_named() {
        let named = [cidr("10.20.0.0/16")];
        assert!(refused_answer("10.1.2.3".parse().unwrap(), &named));
        assert!(refused_answer("192.168.0.10".parse().unwrap(), &named));
        assert!(refused_answer("127.0.0.1".parse().unwrap(), &named));
        assert!(refused_answer("169.254.169.254".parse().unwrap(), &named));
        assert!(!refused_answer("10.20.1.1".parse().unwrap(), &named));
        assert!(!refused_answer("198.51.100.10".parse().unwrap(), &named));
        // Link-local and metadata stay refused even when a policy names them.
        assert!(refused_answer(
            "169.254.169.254".parse().unwrap(),
            &[cidr("169.254.0.0/16")]
        ));
    }
}
