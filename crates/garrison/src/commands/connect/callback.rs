//! The listener that receives the browser's return: a minimal HTTP/1.x
//! server on 127.0.0.1 that answers everything but the one unguessable
//! callback path with an error page and hands the first real delivery to
//! the browser flow.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Accepts connections until one delivers a request to `callback_path`;
/// every other request gets a 404 and the wait goes on. Each connection is
/// handled in its own task, so a browser's idle pre-connection cannot hold
/// up the real one.
pub(super) async fn accept_loop(
    listener: TcpListener,
    callback_path: String,
    tx: mpsc::Sender<(TcpStream, url::Url)>,
) {
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let tx = tx.clone();
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
            // Only the first delivery counts; later ones find the channel
            // full or closed and are dropped.
            let _ = tx.try_send((stream, url));
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
    fn pages_escape_html() {
        let p = page("a<b", "\"x\" & 'y'");
        assert!(p.contains("a&lt;b"));
        assert!(p.contains("&quot;x&quot; &amp; &#39;y&#39;"));
    }
}
