//! `garrison connect`: obtain an outpost and a token and save them in the
//! credentials file that `garrison serve` reads.
//!
//! Two ways in:
//!
//! - the browser (default): Devin's partner flow, OAuth 2.0 authorization
//!   code with PKCE (`docs/outposts-protocol.md`, "Partner connection").
//!   A listener on a fixed loopback callback URL (allowlisted with Devin
//!   once) receives the browser's return; the code and the verifier are
//!   traded for a token at the API.
//! - `--manual`: an existing token, typed without echo (or piped on stdin),
//!   checked against the API before it is saved.
//!
//! The token is never printed, never taken from argv, and only written by
//! [`settings::save_credentials`] (mode 0600 in a 0700 directory).
//!
//! The browser flow lives in `connect/browser.rs`, the listener that receives
//! the browser's return in `connect/callback.rs`, `--manual` in
//! `connect/manual.rs`; this file holds the arguments and what both ways
//! share (saving the credentials, checking a base URL).

use std::path::Path;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use orchestrator::settings::{self, Credentials};

use crate::format::printable;

mod browser;
mod callback;
mod manual;
mod refusal;

use browser::browser;
use manual::manual;

/// Where the admin's browser is sent.
pub(crate) const DEFAULT_APP_URL: &str = "https://app.devin.ai";

const AFTER_HELP: &str = "\
Examples:
  # On a machine with a browser: approve in Devin, the token is saved.
  garrison connect --outpost-name lab-runners

  # With a callback URL registered for your integration:
  garrison connect --callback-url http://127.0.0.1:9000/devin/callback

  # On a headless host, with a token created in Devin's settings:
  garrison connect --manual --outpost outpost_env-...
  # (the token is prompted for without echo, or read from stdin when piped)

The token is saved in $GARRISON_CONFIG/credentials.json (mode 0600;
$GARRISON_CONFIG is /etc/garrison as root, else ~/.config/garrison), where
`garrison serve` and `garrison outposts` find it.

Devin sends the browser back only to callback URLs on the integration's
allowlist, which Cognition configures. The default callback,
http://127.0.0.1:8791/devin/outpost-callback, is the same on every run:
have it registered once (or register your own and pass --callback-url).";

/// Connect this machine to Devin: create or pick an outpost and save a token.
#[derive(Args, Clone, Debug)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct ConnectArgs {
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

    /// Where Devin sends the browser back: a loopback http:// URL (host
    /// 127.0.0.1, localhost or [::1]) that this command listens on. It must
    /// be on the integration's callback allowlist, which Cognition
    /// configures; the default is fixed so it can be registered once
    #[arg(long, env = "GARRISON_CONNECT_CALLBACK_URL", value_name = "URL",
          default_value = fleet::pkce::DEFAULT_CALLBACK_URL, conflicts_with = "manual")]
    pub callback_url: String,

    /// URL of a PNG icon the connect page shows for the outpost
    #[arg(long, value_name = "URL", conflicts_with = "manual")]
    pub outpost_image: Option<String>,

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

pub(crate) async fn run(args: ConnectArgs) -> anyhow::Result<()> {
    let api_url = base_url("--api-url / DEVIN_API_URL", &args.api_url)?;
    let path = settings::credentials_path().context("cannot choose where to save the token")?;
    if args.manual {
        manual(&args, &api_url, &path).await
    } else {
        browser(&args, &api_url, &path).await
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

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
