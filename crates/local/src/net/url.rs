//! Gateway URLs: which host and port they name, and how a sandbox sees them.
//!
//! Hand-parsed rather than through the `url` crate on purpose: the rewrite
//! must change the host and nothing else (no added trailing slash, no
//! dropped default port, no re-encoding), so everything around the host is
//! copied byte for byte.

use std::net::IpAddr;

/// The pieces of a URL's authority that matter here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GatewayAddr {
    /// The host as written, without IPv6 brackets.
    pub host: String,
    /// The explicit port, else the scheme's default (`None` for a scheme
    /// without one).
    pub port: Option<u16>,
    /// Whether `host` names the loopback of whoever resolves it.
    pub loopback: bool,
}

/// Byte offsets of the host inside `url` (brackets excluded) and the port
/// written after it, if any.
struct Split<'a> {
    scheme: &'a str,
    host_start: usize,
    host_end: usize,
    /// The text after `host:` up to the end of the authority.
    port: Option<&'a str>,
}

fn split(url: &str) -> Option<Split<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.is_empty() {
        return None;
    }
    let authority_start = scheme.len() + 3;
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_len];
    // Userinfo may contain ':' and '[', so the host starts after the last '@'.
    let host_offset = authority.rfind('@').map_or(0, |at| at + 1);
    let hostport = &authority[host_offset..];
    let start = authority_start + host_offset;
    let (host_start, host_end, after) = if let Some(inner) = hostport.strip_prefix('[') {
        let close = inner.find(']')?;
        (start + 1, start + 1 + close, &inner[close + 1..])
    } else {
        let end = hostport.find(':').unwrap_or(hostport.len());
        (start, start + end, &hostport[end..])
    };
    let port = match after {
        "" => None,
        p => Some(p.strip_prefix(':')?),
    };
    (host_end > host_start).then_some(Split {
        scheme,
        host_start,
        host_end,
        port,
    })
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme.to_ascii_lowercase().as_str() {
        "ws" | "http" => Some(80),
        "wss" | "https" => Some(443),
        _ => None,
    }
}

/// `localhost`, `*.localhost` (RFC 6761), `127.0.0.0/8`, `::1` and the
/// IPv4-mapped form of `127.0.0.0/8`.
fn is_loopback_host(host: &str) -> bool {
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => a.is_loopback(),
        Ok(IpAddr::V6(a)) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|m| m.is_loopback()),
        Err(_) => false,
    }
}

/// Host and port of a gateway URL; `None` when it is not a URL with a host
/// (the caller decides whether that is an error).
pub(crate) fn parse_gateway(url: &str) -> Option<GatewayAddr> {
    let s = split(url)?;
    let port = match s.port {
        None | Some("") => default_port(s.scheme),
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    let host = url[s.host_start..s.host_end].to_owned();
    Some(GatewayAddr {
        loopback: is_loopback_host(&host),
        host,
        port,
    })
}

/// Replaces a loopback host in `url` with `gateway`, keeping everything else
/// byte for byte; any other URL comes back unchanged.
pub(crate) fn rewrite(url: &str, gateway: IpAddr) -> String {
    let Some(s) = split(url) else {
        return url.to_owned();
    };
    if !is_loopback_host(&url[s.host_start..s.host_end]) {
        return url.to_owned();
    }
    // Replace the brackets too, so an IPv4 gateway never ends up bracketed
    // and an IPv6 one always is.
    let bracketed = url[..s.host_start].ends_with('[');
    let (start, end) = if bracketed {
        (s.host_start - 1, s.host_end + 1)
    } else {
        (s.host_start, s.host_end)
    };
    let host = match gateway {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    format!("{}{host}{}", &url[..start], &url[end..])
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const V4: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));

    #[test]
    fn loopback_hosts_become_the_gateway() {
        let cases = [
            ("ws://127.0.0.1:8790/gateway", "ws://192.0.2.1:8790/gateway"),
            ("ws://127.1.2.3:1/x?y=1#z", "ws://192.0.2.1:1/x?y=1#z"),
            ("wss://localhost/g", "wss://192.0.2.1/g"),
            ("http://LOCALHOST.:80", "http://192.0.2.1:80"),
            ("ws://devin.localhost:9", "ws://192.0.2.1:9"),
            ("ws://[::1]:8790/gateway", "ws://192.0.2.1:8790/gateway"),
            ("ws://[::ffff:127.0.0.1]:5", "ws://192.0.2.1:5"),
            ("ws://user:p@ss@127.0.0.1:7/", "ws://user:p@ss@192.0.2.1:7/"),
            ("ws://127.0.0.1", "ws://192.0.2.1"),
        ];
        for (input, want) in cases {
            assert_eq!(rewrite(input, V4), want, "{input}");
        }
    }

    #[test]
    fn ipv6_gateway_is_bracketed() {
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(rewrite("ws://127.0.0.1:1/a", v6), "ws://[fd00::1]:1/a");
        assert_eq!(rewrite("ws://[::1]:1/a", v6), "ws://[fd00::1]:1/a");
        assert_eq!(rewrite("ws://localhost/a", v6), "ws://[fd00::1]/a");
    }

    #[test]
    fn other_urls_are_unchanged() {
        for url in [
            "wss://gateway.devin.ai/ws",
            "ws://10.0.0.1:8790/",
            "ws://[fd00::2]:1/",
            "ws://128.0.0.1/",
            "ws://localhost.example.com/",
            "not a url",
            "ws://",
            "ws://[::1/broken",
            "ws://host/127.0.0.1",
        ] {
            assert_eq!(rewrite(url, V4), url);
        }
    }

    #[test]
    fn parses_host_and_port() {
        let p = parse_gateway("ws://127.0.0.1:8790/gateway").unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.loopback),
            ("127.0.0.1", Some(8790), true)
        );
        let p = parse_gateway("wss://gw.example/x").unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.loopback),
            ("gw.example", Some(443), false)
        );
        let p = parse_gateway("ws://[::1]/x").unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.loopback),
            ("::1", Some(80), true)
        );
        assert_eq!(parse_gateway("foo://localhost").unwrap().port, None);
        assert!(parse_gateway("ws://127.0.0.1:99999/").is_none());
        assert!(parse_gateway("ws://127.0.0.1:x/").is_none());
        assert!(parse_gateway("127.0.0.1:80").is_none());
    }
}
