//! The listener that receives the browser's return: a minimal HTTP/1.x
//! server on the loopback callback address that answers everything but the
//! callback path with an error page and hands the first delivery of each
//! attempt to the browser flow. The path is fixed (it must be allowlisted),
//! so it proves nothing; the PKCE verifier does: a code that was not issued
//! for this attempt's challenge is refused at the exchange.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Where the callback listener binds and which path it serves, from the
/// callback URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CallbackTarget {
    pub addr: SocketAddr,
    pub path: String,
}

/// Checks a callback URL this command can receive itself: `http://` on a
/// loopback host with a path; the browser runs on this machine.
pub(super) fn callback_target(value: &str) -> anyhow::Result<CallbackTarget> {
    let what = "--callback-url (GARRISON_CONNECT_CALLBACK_URL)";
    let url = url::Url::parse(value.trim())
        .map_err(|e| anyhow!("{what}: {value:?} is not a URL: {e}"))?;
    let ip = match url.host() {
        Some(url::Host::Ipv4(ip)) if ip.is_loopback() => IpAddr::V4(ip),
        Some(url::Host::Ipv6(ip)) if ip.is_loopback() => IpAddr::V6(ip),
        Some(url::Host::Domain("localhost")) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        _ => bail!(
            "{what}: {value:?} must be on this machine (127.0.0.1, localhost or [::1]): \
             `garrison connect` receives the browser's return itself"
        ),
    };
    if url.scheme() != "http" {
        bail!("{what}: {value:?} must be an http:// URL (the listener is plain HTTP on loopback)");
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        bail!("{what}: {value:?} must not have a user name or fragment");
    }
    let port = url.port_or_known_default().unwrap_or(80);
    Ok(CallbackTarget {
        addr: SocketAddr::new(ip, port),
        path: url.path().to_owned(),
    })
}

/// Accepts connections for as long as the flow runs. A request to
/// `callback_path` with a code (or an error) is handed over when `open`
/// (the flow waits for one), which closes it: a second delivery, or one
/// after the first, is answered 409 and never reaches the exchange. Every
/// other request gets a 404. Each connection is handled in its own task,
/// so a browser's idle pre-connection cannot hold up the real one.
pub(super) async fn accept_loop(
    listener: TcpListener,
    callback_path: String,
    open: Arc<AtomicBool>,
    tx: mpsc::Sender<(TcpStream, url::Url)>,
) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let tx = tx.clone();
        let open = open.clone();
        let callback_path = callback_path.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let target = match tokio::time::timeout(
                Duration::from_secs(30),
                read_request_target(&mut stream),
            )
            .await
            {
                Ok(Some(target)) => target,
                _ => return,
            };
            let Ok(url) = url::Url::parse(&format!("http://127.0.0.1:{port}{target}")) else {
                respond(&mut stream, 400, &page("Bad request", "")).await;
                return;
            };
            if url.path() != callback_path {
                respond(&mut stream, 404, &page("Not found", "")).await;
                return;
            }
            let has = |key: &str| url.query_pairs().any(|(k, _)| k == key);
            if !has("code") && !has("error") {
                respond(
                    &mut stream,
                    400,
                    &page("No code", "This address expects Devin's redirect."),
                )
                .await;
                return;
            }
            if open
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                respond(
                    &mut stream,
                    409,
                    &page(
                        "Already answered",
                        "This connection attempt has already received a code; this one \
                         was not used. See the terminal.",
                    ),
                )
                .await;
                return;
            }
            let _ = tx.send((stream, url)).await;
        });
    }
}

/// Reads an HTTP/1.x request head (at most 16 KiB) and returns the target
/// of a `GET`.
async fn read_request_target(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() > 16 * 1024 {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = std::str::from_utf8(&buf).ok()?;
    let mut parts = head.lines().next()?.split(' ');
    let (method, target) = (parts.next()?, parts.next()?);
    (method == "GET" && target.starts_with('/')).then(|| target.to_owned())
}

pub(super) async fn respond(stream: &mut TcpStream, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        409 => "Conflict",
        _ => "Not Found",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n\
         Content-Length: {}\r\nCache-Control: no-store\r\nReferrer-Policy: no-referrer\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

pub(super) fn page(title: &str, message: &str) -> String {
    let (title, message) = (html_escape(title), html_escape(message));
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body style=\"font-family: sans-serif; margin: 4em auto; max-width: 40em\">\
         <h1>{title}</h1><p>{message}</p></body></html>"
    )
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callback_targets_are_loopback_http_with_their_path() {
        let t = callback_target(fleet::pkce::DEFAULT_CALLBACK_URL).unwrap();
        assert_eq!(t.addr, "127.0.0.1:8791".parse().unwrap());
        assert_eq!(t.path, "/devin/outpost-callback");
        let t = callback_target("http://localhost/cb?x=1").unwrap();
        assert_eq!(t.addr, "127.0.0.1:80".parse().unwrap());
        assert_eq!(t.path, "/cb");
        assert_eq!(
            callback_target("http://[::1]:9/x").unwrap().addr,
            "[::1]:9".parse().unwrap()
        );
        for bad in [
            "https://127.0.0.1:1/x",
            "http://partner.example.com/cb",
            "http://10.0.0.1/x",
            "nope",
        ] {
            let e = callback_target(bad).unwrap_err().to_string();
            assert!(e.contains("--callback-url"), "{e}");
        }
    }

    /// The PKCE verifier binds a code to this attempt; the listener takes
    /// one delivery per attempt and answers any later one 409, unused.
    #[tokio::test]
    async fn only_the_first_delivery_of_an_attempt_is_handed_over() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let (tx, mut rx) = mpsc::channel(1);
        let task = tokio::spawn(accept_loop(listener, "/cb".into(), open.clone(), tx));
        let deliver = |code: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET /cb?code={code} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            s
        };
        let _first = deliver("one").await;
        let (_stream, url) = rx.recv().await.unwrap();
        assert_eq!(url.query(), Some("code=one"));
        assert!(!open.load(Ordering::SeqCst), "closed by the first delivery");
        let mut second = deliver("two").await;
        let mut answer = String::new();
        second.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 409"), "{answer}");
        assert!(
            rx.try_recv().is_err(),
            "the second code was not handed over"
        );
        task.abort();
    }

    #[test]
    fn pages_escape_html() {
        let p = page("a<b", "\"x\" & 'y'");
        assert!(p.contains("a&lt;b"));
        assert!(p.contains("&quot;x&quot; &amp; &#39;y&#39;"));
    }
}
