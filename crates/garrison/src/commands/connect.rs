//! `garrison connect`: obtain an outpost and a token and save them in the
//! credentials file that `garrison serve` reads.
//!
//! Two ways in:
//!
//! - the browser (default): Devin's partner flow, OAuth 2.0 authorization
//!   code with PKCE (`docs/outposts-protocol.md`, "Partner connection").
//!   A listener on 127.0.0.1 receives the browser's return; the code and
//!   the verifier are traded for a token at the API.
//! - `--manual`: an existing token, typed without echo (or piped on stdin),
//!   checked against the API before it is saved.
//!
//! The token is never printed, never taken from argv, and only written by
//! [`settings::save_credentials`] (mode 0600 in a 0700 directory).

use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use fleet::pkce::{self, ConnectError};
use fleet::{ClientOptions, FleetClient, FleetError, Pkce, Platform, Secret};
use orchestrator::settings::{self, Credentials};
use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::format::printable;

/// Where the admin's browser is sent.
pub const DEFAULT_APP_URL: &str = "https://app.devin.ai";

const AFTER_HELP: &str = "\
Examples:
  # On a machine with a browser: approve in Devin, the token is saved.
  garrison connect --outpost-name lab-runners

  # On a headless host, with a token created in Devin's settings:
  garrison connect --manual --outpost outpost_env-...
  # (the token is prompted for without echo, or read from stdin when piped)

The token is saved in $GARRISON_CONFIG/credentials.json (mode 0600;
$GARRISON_CONFIG is /etc/garrison as root, else ~/.config/garrison), where
`garrison serve` and `garrison outposts` find it.";

/// Connect this machine to Devin: create or pick an outpost and save a token.
#[derive(Args, Clone, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ConnectArgs {
    /// Devin API base, without /opbeta
    #[arg(long, env = "DEVIN_API_URL", value_name = "URL", default_value = orchestrator::settings::DEFAULT_API_URL)]
    pub api_url: String,

    /// Devin web app that shows the connect page
    #[arg(long, value_name = "URL", default_value = DEFAULT_APP_URL)]
    pub app_url: String,

    /// Name of the outpost to create or connect (Devin's default if omitted)
    #[arg(long, value_name = "NAME", conflicts_with = "manual")]
    pub outpost_name: Option<String>,

    /// Platform of the outpost
    #[arg(long, value_name = "PLATFORM", default_value = "linux",
          value_parser = ["linux", "macos", "windows"], conflicts_with = "manual")]
    pub platform: String,

    /// Local port for the browser's return [default: a random free port]
    #[arg(long, value_name = "PORT", conflicts_with = "manual")]
    pub callback_port: Option<u16>,

    /// How long to wait for the browser
    #[arg(long, value_name = "SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout_secs: u64,

    /// Use an existing token instead of the browser: prompted for without
    /// echo, or read from stdin when stdin is not a terminal
    #[arg(long)]
    pub manual: bool,

    /// With --manual: the outpost the token serves (prompted for on a
    /// terminal when omitted)
    #[arg(long, value_name = "ID", requires = "manual")]
    pub outpost: Option<String>,
}

pub async fn run(args: ConnectArgs) -> anyhow::Result<()> {
    let api_url = base_url("--api-url / DEVIN_API_URL", &args.api_url)?;
    let path = settings::credentials_path().context("cannot choose where to save the token")?;
    if args.manual {
        manual(&args, &api_url, &path).await
    } else {
        browser(&args, &api_url, &path).await
    }
}

// ---------------------------------------------------------------------------
// The browser flow
// ---------------------------------------------------------------------------

async fn browser(args: &ConnectArgs, api_url: &str, path: &Path) -> anyhow::Result<()> {
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

/// Accepts connections until one delivers a request to `callback_path`;
/// every other request gets a 404 and the wait goes on. Each connection is
/// handled in its own task, so a browser's idle pre-connection cannot hold
/// up the real one.
async fn accept_loop(
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

async fn respond(stream: &mut TcpStream, status: u16, body: &str) {
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

fn page(title: &str, message: &str) -> String {
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

// ---------------------------------------------------------------------------
// --manual
// ---------------------------------------------------------------------------

async fn manual(args: &ConnectArgs, api_url: &str, path: &Path) -> anyhow::Result<()> {
    let interactive = std::io::stdin().is_terminal();
    let outpost = match &args.outpost {
        Some(id) => Some(id.trim().to_owned()).filter(|id| !id.is_empty()),
        None if interactive => {
            tokio::task::spawn_blocking(|| prompt_line("Outpost id (empty for none): ")).await??
        }
        None => None,
    };
    let token = tokio::task::spawn_blocking(move || read_token(interactive)).await??;

    let client = FleetClient::new(api_url, token.clone(), ClientOptions::default())
        .map_err(|e| anyhow!("{e}"))?;
    let verified = match &outpost {
        Some(id) => match client.get_outpost(id).await {
            Ok(Some(o)) => format!(
                "outpost {} ({}, {})",
                printable(&o.metadata.outpost_id),
                printable(&o.metadata.name),
                o.spec.platform
            ),
            Ok(None) => bail!(
                "no such outpost: {} at {api_url}; nothing was saved. \
                 `garrison outposts list` shows the outposts the token can see",
                printable(id)
            ),
            Err(e) => return Err(verify_error(e, api_url)),
        },
        None => match client.list_outposts().await {
            Ok(all) => format!("{} outpost(s) visible", all.len()),
            Err(e) => return Err(verify_error(e, api_url)),
        },
    };

    let credentials = Credentials {
        api_url: api_url.to_owned(),
        outpost_id: outpost.clone(),
        token,
    };
    save(path, &credentials)?;
    println!("The token works at {api_url}: {verified}.");
    if outpost.is_none() {
        println!(
            "No outpost was saved: pass --outpost to `garrison serve`, or run \
             `garrison connect --manual --outpost ID` again."
        );
    }
    print_saved(path);
    Ok(())
}

fn verify_error(error: FleetError, api_url: &str) -> anyhow::Error {
    let what = match &error {
        FleetError::Unauthorized { .. } => {
            "the token was rejected (401): check that it was copied whole and is not revoked"
                .to_owned()
        }
        FleetError::Forbidden { scope_hint, .. } => {
            format!("the token lacks the {scope_hint} scope (403): create a token with that scope")
        }
        other => format!("cannot check the token at {api_url}: {other}"),
    };
    anyhow!("{what}; nothing was saved")
}

/// The token: without echo from the terminal, else one line of stdin.
fn read_token(interactive: bool) -> anyhow::Result<Secret> {
    let raw = if interactive {
        rpassword::prompt_password("Devin token (input hidden): ")
            .context("cannot read the token from the terminal")?
    } else {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("cannot read the token from stdin")?;
        line
    };
    let token = raw.trim();
    if token.is_empty() {
        bail!("no token given; nothing was saved");
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("the token contains whitespace or control characters (value not shown)");
    }
    Ok(Secret::new(token))
}

fn prompt_line(prompt: &str) -> anyhow::Result<Option<String>> {
    let mut err = std::io::stderr().lock();
    write!(err, "{prompt}")?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(Some(line.trim().to_owned()).filter(|l| !l.is_empty()))
}

// ---------------------------------------------------------------------------
// Shared
// ---------------------------------------------------------------------------

fn save(path: &Path, credentials: &Credentials) -> anyhow::Result<()> {
    if let Ok(Some(old)) = settings::load_credentials(path) {
        let outpost = old.outpost_id.as_deref().unwrap_or("no outpost");
        println!(
            "Replacing the saved credentials for {} ({}).",
            printable(outpost),
            old.api_url
        );
    }
    settings::save_credentials(path, credentials)?;
    Ok(())
}

fn print_saved(path: &Path) {
    println!("Saved the token in {} (mode 0600).", path.display());
    println!();
    println!("Next: garrison serve");
}

/// An API or app base URL: http(s), a host, no query; no trailing slash.
pub(crate) fn base_url(what: &str, value: &str) -> anyhow::Result<String> {
    let text = value.trim();
    let url = url::Url::parse(text).map_err(|e| anyhow!("{what}: {text:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        bail!("{what}: {text:?} must be an http:// or https:// URL with a host");
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        bail!("{what}: {text:?} must not have a user name, query or fragment");
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
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

    #[test]
    fn pages_escape_html() {
        let p = page("a<b", "\"x\" & 'y'");
        assert!(p.contains("a&lt;b"));
        assert!(p.contains("&quot;x&quot; &amp; &#39;y&#39;"));
    }

    #[test]
    fn base_url_trims_and_checks() {
        assert_eq!(
            base_url("x", " https://api.devin.ai/ ").unwrap(),
            "https://api.devin.ai"
        );
        assert!(base_url("x", "api.devin.ai").is_err());
        assert!(base_url("x", "https://h/?q=1").is_err());
    }
}
