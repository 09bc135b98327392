//! The host's links and their addresses, as `ip -j address show` reports
//! them.

use std::collections::BTreeSet;
use std::net::IpAddr;

/// Each address in `ip -j address show` output, with its link's name.
pub(super) fn link_addresses(json: &str) -> Vec<(String, IpAddr)> {
    let links: Vec<serde_json::Value> = serde_json::from_str(json).unwrap_or_default();
    let mut out = Vec::new();
    for link in &links {
        let name = link.get("ifname").and_then(|n| n.as_str()).unwrap_or("?");
        let addrs = link.get("addr_info").and_then(|a| a.as_array());
        out.extend(
            addrs
                .into_iter()
                .flatten()
                .filter_map(|a| a.get("local")?.as_str()?.parse::<IpAddr>().ok())
                .map(|ip| (name.to_owned(), ip)),
        );
    }
    out
}

/// The addresses of `links`, loopback excluded.
pub(super) fn non_loopback(links: &[(String, IpAddr)]) -> BTreeSet<IpAddr> {
    links
        .iter()
        .map(|(_, ip)| *ip)
        .filter(|ip| !ip.is_loopback())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ip_json() {
        let addrs = r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1"},
            {"family":"inet6","local":"::1"}]},
            {"ifname":"eth0","addr_info":[{"family":"inet","local":"192.0.2.2"},
            {"family":"inet6","local":"fd00::2"}]},{"ifname":"ifb0","addr_info":[]}]"#;
        let got: Vec<String> = non_loopback(&link_addresses(addrs))
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(got, ["192.0.2.2", "fd00::2"]);
    }
}
