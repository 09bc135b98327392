//! The client itself: its options, construction and the shared state every
//! call goes through (the calls are in `queue.rs`, `request.rs` and the
//! crate's `outposts.rs` and `watch.rs`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::time::Duration;

use reqwest::header::{self, HeaderMap, HeaderValue};
use url::Url;

use crate::error::FleetError;
use crate::retry::{Backoff, RetryPolicy};
use crate::stats::{RequestStats, Stats};
use common::Secret;

/// The path prefix of the fleet API under the API base URL.
pub(crate) const API_PREFIX: &str = "/opbeta/outposts";

/// Largest `first` the list accepts.
pub(crate) const MAX_PAGE_SIZE: u32 = 200;

/// Scope hints for 403 errors.
pub(crate) const SCOPE_MACHINE: &str = "account.outposts.machine";
pub(crate) const SCOPE_ORCHESTRATOR: &str = "account.outposts.orchestrator";

/// Tuning of a [`FleetClient`]. `Default` gives production values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// Whole-request limit for every non-streaming call, body included.
    pub request_timeout: Duration,
    /// TCP + TLS connect limit (watch included).
    pub connect_timeout: Duration,
    /// Retries of idempotent GETs (list, get, outposts reads).
    pub retry: RetryPolicy,
    /// A watch that receives no bytes at all, not even a `: keepalive`
    /// comment, for this long is treated as dead.
    pub watch_idle_timeout: Duration,
    /// Delays between reconnects of [`FleetClient::watch_forever`].
    pub watch_backoff: Backoff,
    /// A watch connection that lived this long, or delivered an event, was
    /// healthy: the reconnect backoff starts over after it.
    pub watch_healthy_after: Duration,
    /// Cap on a JSON response body.
    pub max_body_bytes: usize,
    /// Cap on one SSE line and on one event's accumulated `data`.
    pub max_event_bytes: usize,
    /// `first` used by [`FleetClient::list_all`].
    pub list_page_size: u32,
    /// [`FleetClient::list_all`] gives up after this many pages, so a server
    /// that never stops saying `has_next_page` cannot loop a client forever.
    pub max_list_pages: usize,
    /// [`FleetClient::list_all`] gives up once it holds more distinct
    /// entries than this, for the same reason.
    pub max_list_items: usize,
    /// The `User-Agent` sent with every request.
    pub user_agent: String,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            watch_idle_timeout: Duration::from_secs(60),
            watch_backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)),
            watch_healthy_after: Duration::from_secs(30),
            max_body_bytes: 1 << 20,
            max_event_bytes: 1 << 20,
            list_page_size: MAX_PAGE_SIZE,
            max_list_pages: 10_000,
            max_list_items: 100_000,
            user_agent: concat!("garrison-fleet/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// A client of the fleet API. Cheap to clone: clones share one connection
/// pool and one set of counters.
///
/// `Debug` shows the API URL and options only; the token is never printed.
#[derive(Clone)]
pub struct FleetClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    /// API base without a trailing slash, e.g. `https://api.devin.ai`.
    pub(crate) api_url: String,
    /// Kept only to scrub it from error snippets; it travels in a sensitive
    /// default header of `http`.
    pub(crate) token: Secret,
    pub(crate) options: ClientOptions,
    pub(crate) stats: Stats,
    /// Which outposts URL spelling works (see `outposts.rs`).
    pub(crate) outposts_spelling: AtomicU8,
}

impl fmt::Debug for FleetClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetClient")
            .field("api_url", &self.inner.api_url)
            .field("token", &self.inner.token)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl FleetClient {
    /// Builds a client for the API at `api_url` (the base, without
    /// `/opbeta`: `https://api.devin.ai` or `http://127.0.0.1:PORT`).
    ///
    /// Fails on an unparseable or non-HTTP(S) URL and on an empty token or
    /// one that cannot be sent in a header.
    pub fn new(
        api_url: &str,
        token: Secret,
        options: ClientOptions,
    ) -> Result<FleetClient, FleetError> {
        let api_url = normalize_api_url(api_url)?;
        if token.is_empty() {
            return Err(FleetError::InvalidArgument("the API token is empty".into()));
        }
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                FleetError::InvalidArgument(
                    "the API token contains characters not allowed in a header".into(),
                )
            })?;
        // Sensitive: hyper and reqwest leave it out of their Debug output.
        auth.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, auth);
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(options.connect_timeout)
            .user_agent(options.user_agent.clone())
            // The API never redirects; following one could carry the bearer
            // token to wherever a compromised or misconfigured proxy points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| FleetError::InvalidArgument(format!("cannot build HTTP client: {e}")))?;
        Ok(FleetClient {
            inner: Arc::new(Inner {
                http,
                api_url,
                token,
                options,
                stats: Stats::default(),
                outposts_spelling: AtomicU8::new(0),
            }),
        })
    }

    /// The API base this client talks to (no trailing slash, no `/opbeta`).
    pub fn api_url(&self) -> &str {
        &self.inner.api_url
    }

    /// The options the client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// A snapshot of the request counters, by route template.
    pub fn stats(&self) -> RequestStats {
        self.inner.stats.snapshot()
    }
}

/// Checks the API base: HTTP(S), no query; trailing slashes and an
/// accidental `/opbeta[/outposts]` suffix are dropped (our choice: users paste
/// either form).
fn normalize_api_url(api_url: &str) -> Result<String, FleetError> {
    let parsed = Url::parse(api_url.trim())
        .map_err(|e| FleetError::InvalidArgument(format!("bad API URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(FleetError::InvalidArgument(format!(
            "API URL must be http or https, not {}",
            parsed.scheme()
        )));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(FleetError::InvalidArgument(
            "API URL must not have a query or fragment".into(),
        ));
    }
    let mut s = parsed.as_str().trim_end_matches('/').to_owned();
    for suffix in [API_PREFIX, "/opbeta"] {
        if let Some(stripped) = s.strip_suffix(suffix) {
            s = stripped.to_owned();
            break;
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_url_is_normalized() {
        for (given, want) in [
            ("https://api.devin.ai", "https://api.devin.ai"),
            ("https://api.devin.ai/", "https://api.devin.ai"),
            ("https://api.devin.ai/opbeta", "https://api.devin.ai"),
            (
                "https://api.devin.ai/opbeta/outposts/",
                "https://api.devin.ai",
            ),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
            ("http://proxy/devin/", "http://proxy/devin"),
        ] {
            assert_eq!(normalize_api_url(given).unwrap(), want, "{given}");
        }
        assert!(normalize_api_url("ftp://x").is_err());
        assert!(normalize_api_url("not a url").is_err());
        assert!(normalize_api_url("http://x/?a=b").is_err());
    }

    #[test]
    fn client_refuses_bad_tokens_and_hides_the_token() {
        let opts = ClientOptions::default;
        assert!(FleetClient::new("http://127.0.0.1:1", Secret::new(""), opts()).is_err());
        assert!(FleetClient::new("http://127.0.0.1:1", Secret::new("a\nb"), opts()).is_err());
        let c = FleetClient::new("http://127.0.0.1:1", Secret::new("cog_hidden"), opts()).unwrap();
        let debug = format!("{c:?}");
        assert!(!debug.contains("cog_hidden"), "{debug}");
        assert!(debug.contains("127.0.0.1"));
    }
}
