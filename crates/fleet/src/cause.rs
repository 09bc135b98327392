//! Why a request got no answer, in words an operator can act on.
//!
//! reqwest's own message is "error sending request for url (...)": the
//! reason (refused, DNS, TLS, ...) is only further down its `source()`
//! chain (hyper, then the I/O error). [`describe`] names the reason first
//! and keeps the whole chain after it.

use std::error::Error;
use std::io::ErrorKind;

/// `"connection refused: error sending request for url (...): client error
/// (Connect): tcp connect error: Connection refused (os error 111)"`: the
/// reason in plain words when it can be told, then every message of the
/// chain.
pub(crate) fn describe(err: &(dyn Error + 'static)) -> String {
    let chain = chain(err);
    match reason(err, &chain) {
        Some(reason) => format!("{reason}: {chain}"),
        None => chain,
    }
}

/// The messages of `err` and its sources joined with `": "`, leaving out a
/// message its predecessor already contains (some errors repeat their
/// source's text in their own).
pub(crate) fn chain(err: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn Error + 'static)> = Some(err);
    while let Some(e) = next {
        let message = e.to_string();
        let repeated = parts.last().is_some_and(|last| last.contains(&message));
        if !message.is_empty() && !repeated {
            parts.push(message);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// The reason in plain words: from an I/O error's kind anywhere in the
/// chain, else from the chain's text (DNS and TLS failures carry no kind
/// of their own).
fn reason(err: &(dyn Error + 'static), chain: &str) -> Option<&'static str> {
    let mut next: Option<&(dyn Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(reason) = io_reason(io.kind())
        {
            return Some(reason);
        }
        next = e.source();
    }
    let text = chain.to_ascii_lowercase();
    let any = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if any(&[
        "dns error",
        "failed to lookup address",
        "name or service not known",
        "no address associated",
        "temporary failure in name resolution",
    ]) {
        Some("DNS lookup failed")
    } else if any(&["certificate", "tls", "handshake", "invalid peer"]) {
        Some("TLS failed")
    } else if any(&["connection refused"]) {
        Some("connection refused")
    } else if any(&["connection closed before message completed"]) {
        Some("connection closed by the server")
    } else {
        None
    }
}

fn io_reason(kind: ErrorKind) -> Option<&'static str> {
    Some(match kind {
        ErrorKind::ConnectionRefused => "connection refused",
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            "connection reset"
        }
        ErrorKind::TimedOut => "timed out",
        ErrorKind::HostUnreachable => "host unreachable",
        ErrorKind::NetworkUnreachable | ErrorKind::NetworkDown => "network unreachable",
        ErrorKind::AddrNotAvailable => "address not available",
        ErrorKind::PermissionDenied => "permission denied",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a message and an optional source, as reqwest and
    /// hyper nest theirs.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<dyn Error + 'static>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref()
        }
    }

    fn nested(outer: &'static str, inner: impl Error + 'static) -> Layer {
        Layer(outer, Some(Box::new(inner)))
    }

    #[test]
    fn the_reason_comes_first_then_the_whole_chain() {
        let io = std::io::Error::from(ErrorKind::ConnectionRefused);
        let io_text = io.to_string();
        let err = nested(
            "error sending request for url (http://127.0.0.1:9/x)",
            nested("client error (Connect)", nested("tcp connect error", io)),
        );
        assert_eq!(
            describe(&err),
            format!(
                "connection refused: error sending request for url (http://127.0.0.1:9/x): \
                 client error (Connect): tcp connect error: {io_text}"
            )
        );
    }

    #[test]
    fn dns_and_tls_failures_are_told_by_their_text() {
        let dns = nested(
            "error sending request for url (https://api.example.invalid/)",
            nested(
                "client error (Connect)",
                nested(
                    "dns error",
                    Layer(
                        "failed to lookup address information: Name or service not known",
                        None,
                    ),
                ),
            ),
        );
        assert!(
            describe(&dns).starts_with("DNS lookup failed: error sending request"),
            "{}",
            describe(&dns)
        );
        let tls = nested(
            "error sending request for url (https://127.0.0.1:8443/)",
            Layer("invalid peer certificate: UnknownIssuer", None),
        );
        assert!(
            describe(&tls).starts_with("TLS failed: "),
            "{}",
            describe(&tls)
        );
    }

    #[test]
    fn a_message_repeated_by_its_source_is_kept_once_and_unknowns_stay_plain() {
        let err = nested("request failed: boom", Layer("boom", None));
        assert_eq!(describe(&err), "request failed: boom");
        let err = nested("outer", Layer("inner", None));
        assert_eq!(describe(&err), "outer: inner");
    }

    /// A real reqwest error from a refused connection: its reason is deep
    /// in the chain, and `describe` finds it.
    #[tokio::test]
    async fn a_refused_connection_says_so() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let err = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap_err();
        let text = describe(&err);
        assert!(text.starts_with("connection refused: "), "{text}");
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    }
}
