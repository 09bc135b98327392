//! The browser flow: Devin's partner connection, OAuth 2.0 authorization
//! code with PKCE. The admin approves on the connect page, the browser
//! returns to a listener on 127.0.0.1 (see `callback.rs`), and the code and
//! the verifier are traded for a token at the API.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use fleet::pkce::{self, ConnectError};
use fleet::{Pkce, Platform};
use orchestrator::settings::Credentials;
use rand::Rng;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::callback::{accept_loop, page, respond};
use super::{ConnectArgs, base_url, print_saved, save};
use crate::format::printable;

pub(super) async fn browser(args: &ConnectArgs, api_url: &str, path: &Path) -> anyhow::Result<()> {
    let app_url = base_url("--app-url", &args.app_url)?;
    let port = args.callback_port.unwrap_or(0);
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| match args.callback_port {
            Some(p) => format!(
                "cannot listen on 127.0.0.1:{p} for the browser's return; \
                 pick another --callback-port, or omit it for a free one"
            ),
            None => "cannot listen on 127.0.0.1 for the browser's return".to_owned(),
        })?;
    let port = listener.local_addr()?.port();

    // The callback path carries an unguessable nonce, so only the browser
    // that was given the connect URL can deliver a code to this listener
    // (the CSRF protection a `state` parameter would give, without relying
    // on the service echoing one back).
    let nonce = random_token(32);
    let callback_path = format!("/callback/{nonce}");
    let callback_url = format!("http://127.0.0.1:{port}{callback_path}");

    let pkce = Pkce::generate();
    let platform = Platform::from(args.platform.as_str());
    let connect_url = pkce::connect_url(
        &app_url,
        &callback_url,
        &pkce,
        args.outpost_name.as_deref(),
        Some(&platform),
    )
    .map_err(|e| anyhow!("{e}"))?;

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "To connect Garrison to Devin, open this page and approve:"
    )?;
    writeln!(out)?;
    writeln!(out, "  {connect_url}")?;
    writeln!(out)?;
    if open_browser(connect_url.as_str()) {
        writeln!(out, "(A browser was opened for you.)")?;
    }
    writeln!(
        out,
        "Waiting up to {} s for the browser to return to {callback_url} ...",
        args.timeout_secs
    )?;
    out.flush()?;
    drop(out);

    let (tx, mut rx) = mpsc::channel(1);
    let acceptor = tokio::spawn(accept_loop(listener, callback_path, tx));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    let received = tokio::time::timeout_at(deadline, rx.recv()).await;
    acceptor.abort();
    let (mut stream, callback) = match received {
        Ok(Some(got)) => got,
        Ok(None) => bail!("the callback listener stopped unexpectedly"),
        Err(_) => bail!(
            "no answer from the browser within {} s. Run `garrison connect` again \
             (--timeout-secs waits longer), or on a host without a browser run \
             `garrison connect --manual` with an existing token",
            args.timeout_secs
        ),
    };

    let outcome = exchange(&callback, &pkce, api_url).await;
    let page = match &outcome {
        Ok(_) => page(
            "Garrison is connected",
            "You can close this tab and return to the terminal.",
        ),
        Err(e) => page(
            "Garrison could not connect",
            &format!("{e:#}. See the terminal for what to do next."),
        ),
    };
    respond(&mut stream, 200, &page).await;
    let token = outcome?;

    let api_url = issued_api_url(&token.api_base_url).unwrap_or_else(|| api_url.to_owned());
    let credentials = Credentials {
        api_url: api_url.clone(),
        outpost_id: Some(token.outpost_id.clone()),
        token: token.access_token.clone(),
    };
    save(path, &credentials)?;

    let name = if token.outpost_name.is_empty() {
        String::new()
    } else {
        format!(" ({})", printable(&token.outpost_name))
    };
    println!();
    println!(
        "Connected outpost {}{name} at {api_url}.",
        printable(&token.outpost_id)
    );
    print_saved(path);
    Ok(())
}

/// Reads the code from the callback and trades it for a token.
async fn exchange(
    callback: &url::Url,
    pkce: &Pkce,
    api_url: &str,
) -> anyhow::Result<fleet::ConnectionToken> {
    let code = pkce::callback_code(callback).map_err(|e| match e {
        ConnectError::OAuth { error, description } if error == "access_denied" => anyhow!(
            "the connection was not approved in the browser ({}); run `garrison connect` again",
            description.as_deref().unwrap_or("access_denied")
        ),
        other => anyhow!("the browser returned an error: {other}; run `garrison connect` again"),
    })?;
    pkce::exchange_code(api_url, &code, &pkce.verifier)
        .await
        .map_err(|e| match e {
            ConnectError::InvalidGrant { .. } => {
                anyhow!("the code was rejected or already used; run `garrison connect` again")
            }
            ConnectError::Fleet(fleet) => {
                anyhow!("cannot exchange the code at {api_url}: {fleet}")
            }
            other => anyhow!("{api_url} refused the code: {other}; run `garrison connect` again"),
        })
}

/// Opens `url` in a browser when this session has a display and an opener
/// on PATH. Never fails: the URL is printed either way.
fn open_browser(url: &str) -> bool {
    let has_display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if !has_display {
        return false;
    }
    let Some(opener) = ["xdg-open", "sensible-browser"]
        .iter()
        .find_map(|name| find_on_path(name))
    else {
        return false;
    };
    match std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            // Reap it whenever it exits; its status does not matter.
            std::thread::spawn(move || child.wait());
            true
        }
        Err(_) => false,
    }
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The API base the exchange named, if it is a usable http(s) URL; a
/// trailing `/opbeta[/outposts]` is dropped (the client adds it).
fn issued_api_url(value: &str) -> Option<String> {
    let url = url::Url::parse(value.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https")
        || url.host_str().is_none_or(str::is_empty)
        || !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return None;
    }
    let text = url.as_str().trim_end_matches('/');
    let text = text.strip_suffix("/opbeta/outposts").unwrap_or(text);
    let text = text.strip_suffix("/opbeta").unwrap_or(text);
    Some(text.to_owned())
}

fn random_token(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut out = String::with_capacity(len);
    for _ in 0..len {
        let _ = out.write_char(ALPHABET[rng.random_range(0..ALPHABET.len())] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_api_url_is_normalised_or_refused() {
        assert_eq!(
            issued_api_url("https://api.devin.ai/").as_deref(),
            Some("https://api.devin.ai")
        );
        assert_eq!(
            issued_api_url("https://api.devin.ai/opbeta/outposts").as_deref(),
            Some("https://api.devin.ai")
        );
        assert_eq!(issued_api_url("ftp://x"), None);
        assert_eq!(issued_api_url("https://u:p@x"), None);
        assert_eq!(issued_api_url(""), None);
    }
}
