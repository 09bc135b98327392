//! The browser flow: Devin's partner connection, OAuth 2.0 authorization
//! code with PKCE. The admin approves on the connect page, the browser
//! returns to the fixed callback URL (see `callback.rs`), and the code and
//! the verifier are traded for a token at the API. An `invalid_grant` is
//! terminal for that verifier: the flow says so and starts again from a
//! new one, a bounded number of times.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use fleet::pkce::{self, ConnectError, ConnectRequest};
use fleet::{Pkce, Platform};
use orchestrator::settings::Credentials;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::callback::{accept_loop, callback_target, page, respond};
use super::refusal::{self, EXISTING_OUTPOST};
use super::{ConnectArgs, base_url, print_saved, save};
use crate::format::printable;

/// Attempts (each with a new verifier) before an `invalid_grant` ends the
/// command: a stale tab or a slow admin is retried, a loop is not.
const MAX_ATTEMPTS: u32 = 3;

/// What one attempt ended with.
enum Attempt {
    Connected(fleet::ConnectionToken),
    /// `invalid_grant`: start again from a new verifier.
    Refused(String),
}

pub(super) async fn browser(args: &ConnectArgs, api_url: &str, path: &Path) -> anyhow::Result<()> {
    let app_url = base_url("--app-url", &args.app_url)?;
    let callback_url = args.callback_url.trim().to_owned();
    let target = callback_target(&callback_url)?;
    let listener = TcpListener::bind(target.addr).await.with_context(|| {
        format!(
            "cannot listen on {} for the browser's return to {callback_url} (is another \
             `garrison connect` running?); stop what holds the port, or pass another \
             registered URL with --callback-url",
            target.addr
        )
    })?;
    let open = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::channel(1);
    let acceptor = tokio::spawn(accept_loop(listener, target.path, open.clone(), tx));
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut outcome = Err(anyhow!("no attempt was made"));
    for attempt in 1..=MAX_ATTEMPTS {
        let result = run_attempt(
            args,
            &app_url,
            api_url,
            &callback_url,
            &open,
            &mut rx,
            deadline,
        )
        .await;
        match result {
            Ok(Attempt::Refused(why)) if attempt < MAX_ATTEMPTS => {
                eprintln!(
                    "Devin refused the code ({why}). Codes are single use, expire after \
                     10 minutes and only work with the verifier of the attempt that asked \
                     for them, so this attempt is over: starting again with a new verifier \
                     (attempt {} of {MAX_ATTEMPTS}).",
                    attempt + 1
                );
            }
            Ok(Attempt::Refused(why)) => {
                outcome = Err(anyhow!(
                    "Devin refused the code ({why}) on {MAX_ATTEMPTS} attempts; nothing was \
                     saved. Run `garrison connect` again and approve the newest page only; {EXISTING_OUTPOST}"
                ));
                break;
            }
            Ok(Attempt::Connected(token)) => {
                outcome = Ok(token);
                break;
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    acceptor.abort();
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

/// One attempt: a new verifier, the page, the wait for the browser, the
/// exchange, and the answer page the browser is shown.
async fn run_attempt(
    args: &ConnectArgs,
    app_url: &str,
    api_url: &str,
    callback_url: &str,
    open: &AtomicBool,
    rx: &mut mpsc::Receiver<(TcpStream, url::Url)>,
    deadline: Instant,
) -> anyhow::Result<Attempt> {
    let pkce = Pkce::generate();
    let platform = Platform::from(args.platform.as_str());
    let request = ConnectRequest {
        outpost_name: args.outpost_name.as_deref(),
        outpost_image: args.outpost_image.as_deref(),
        platform: Some(&platform),
    };
    let connect_url =
        pkce::connect_url(app_url, callback_url, &pkce, &request).map_err(|e| anyhow!("{e}"))?;
    print_instructions(connect_url.as_str(), callback_url, deadline)?;

    // A delivery left over from the last attempt belongs to its verifier.
    while let Ok((mut stale, _)) = rx.try_recv() {
        respond(
            &mut stale,
            409,
            &page("Too late", "That code belonged to an earlier attempt."),
        )
        .await;
    }
    open.store(true, Ordering::SeqCst);
    let received = tokio::time::timeout_at(deadline, rx.recv()).await;
    open.store(false, Ordering::SeqCst);
    let (mut stream, callback) = match received {
        Ok(Some(got)) => got,
        Ok(None) => bail!("the callback listener stopped unexpectedly"),
        Err(_) => bail!(
            "no answer from the browser within {} s; nothing was saved. If Devin's page \
             refused the connection: {}; for a taken outpost name, choose another \
             (--outpost-name or on the page), and {EXISTING_OUTPOST}. Otherwise run \
             `garrison connect` again (--timeout-secs waits longer), or on a host \
             without a browser use `garrison connect --manual` with an existing token",
            args.timeout_secs,
            refusal::callback_advice(callback_url)
        ),
    };

    let outcome = match pkce::callback_code(&callback) {
        Err(e) => Err(anyhow!(refusal::from_callback(&e, callback_url))),
        Ok(code) => match pkce::exchange_code(api_url, &code, &pkce.verifier).await {
            Ok(token) => Ok(Attempt::Connected(token)),
            Err(ConnectError::InvalidGrant { description }) => Ok(Attempt::Refused(format!(
                "invalid_grant: {}",
                description.as_deref().unwrap_or("no description")
            ))),
            Err(e) => Err(anyhow!(refusal::from_exchange(&e, api_url))),
        },
    };
    let page = match &outcome {
        Ok(Attempt::Connected(_)) => page(
            "Garrison is connected",
            "You can close this tab and return to the terminal.",
        ),
        Ok(Attempt::Refused(why)) => page(
            "Devin refused the code",
            &format!("{why}. The terminal shows a new page to approve."),
        ),
        Err(e) => page(
            "Garrison could not connect",
            &format!("{e:#}. See the terminal for what to do next."),
        ),
    };
    respond(&mut stream, 200, &page).await;
    outcome
}

fn print_instructions(
    connect_url: &str,
    callback_url: &str,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "To connect Garrison to Devin, open this page and approve:"
    )?;
    writeln!(out)?;
    writeln!(out, "  {connect_url}")?;
    writeln!(out)?;
    if open_browser(connect_url) {
        writeln!(out, "(A browser was opened for you.)")?;
    }
    let left = deadline.saturating_duration_since(Instant::now()).as_secs();
    writeln!(
        out,
        "Waiting up to {left} s for the browser to return to {callback_url} ..."
    )?;
    writeln!(
        out,
        "(Devin sends it there only if that URL is on the integration's allowlist; \
         an outpost name that is taken is refused on the page.)"
    )?;
    out.flush()?;
    Ok(())
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
