//! The typed fleet client: queue calls (list, get, claim, release) and the
//! request machinery (timeouts, capped bodies, GET retries, counters) that
//! [`crate::watch`] and the outposts calls build on.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::time::Duration;

use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};
use url::Url;

use crate::error::{ClaimError, FleetError, MAX_SNIPPET_CHARS, snippet};
use crate::http;
use crate::retry::{Backoff, RetryPolicy};
use crate::stats::{RequestStats, Stats, route};
use crate::wire::{AcceptorBody, ListPage, Phase, QueueEntry};
use common::Secret;

/// The path prefix of the fleet API under the API base URL.
pub const API_PREFIX: &str = "/opbeta/outposts";

/// Largest `first` the list accepts.
pub const MAX_PAGE_SIZE: u32 = 200;

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
            user_agent: concat!("garrison-fleet/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// Parameters of `GET /devins`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub outpost: String,
    pub phase: Option<Phase>,
    pub acceptor_id: Option<String>,
    /// Page size, clamped to 1..=200; the server's default (100) when `None`.
    pub first: Option<u32>,
    pub cursor: Option<String>,
}

impl ListQuery {
    pub fn new(outpost: impl Into<String>) -> Self {
        Self {
            outpost: outpost.into(),
            ..Self::default()
        }
    }

    pub fn phase(mut self, phase: Phase) -> Self {
        self.phase = Some(phase);
        self
    }

    pub fn acceptor_id(mut self, acceptor_id: impl Into<String>) -> Self {
        self.acceptor_id = Some(acceptor_id.into());
        self
    }

    pub fn first(mut self, first: u32) -> Self {
        self.first = Some(first);
        self
    }

    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }
}

/// What a release did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// 200: the session is back in the queue.
    Released,
    /// 409: the caller does not hold the claim (it expired and someone else
    /// took it, or it was never ours). Nothing left to release.
    NotHolder,
    /// 404: the entry is gone. Nothing left to release.
    Gone,
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

/// A response as the request machinery returns it: the status and either the
/// whole (capped) body of a success or a prefix of an error body.
#[derive(Debug)]
pub(crate) struct Raw {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

impl Raw {
    pub(crate) fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// One request to send.
pub(crate) struct Call {
    pub(crate) route: &'static str,
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) json: Option<serde_json::Value>,
    /// Only idempotent calls are retried.
    pub(crate) idempotent: bool,
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

    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// A snapshot of the request counters, by route template.
    pub fn stats(&self) -> RequestStats {
        self.inner.stats.snapshot()
    }

    /// One page of the queue. Items that fail to parse or validate are
    /// skipped with a warning and counted in [`ListPage::skipped`].
    pub async fn list_page(&self, query: &ListQuery) -> Result<ListPage, FleetError> {
        let mut url = self.url(&["devins"])?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("outpost", &query.outpost);
            if let Some(phase) = &query.phase {
                q.append_pair("phase", phase.as_str());
            }
            if let Some(acceptor_id) = &query.acceptor_id {
                q.append_pair("acceptor_id", acceptor_id);
            }
            if let Some(first) = query.first {
                q.append_pair("first", &first.clamp(1, MAX_PAGE_SIZE).to_string());
            }
            if let Some(cursor) = &query.cursor {
                q.append_pair("cursor", cursor);
            }
        }
        let raw = self.execute(Call::get(route::LIST, url)).await?;
        if !raw.is_success() {
            return Err(self.status_error(route::LIST, SCOPE_MACHINE, &raw));
        }
        let value: serde_json::Value = self.decode(route::LIST, &raw.body)?;
        let page = RawPage::from_value(route::LIST, &value)?;
        let mut items = Vec::with_capacity(page.items.len());
        let mut skipped = 0;
        for item in page.items {
            match parse_entry(item) {
                Ok(entry) => items.push(entry),
                Err(reason) => {
                    let reason = self.scrub(&reason);
                    warn!(route = route::LIST, %reason, "skipping a queue entry that does not parse");
                    skipped += 1;
                }
            }
        }
        self.inner.stats.skipped(route::LIST, skipped as u64);
        Ok(ListPage {
            items,
            cursor: page.cursor,
            has_next_page: page.has_next_page,
            total: page.total,
            skipped,
        })
    }

    /// The whole queue of `outpost` (optionally filtered), following the
    /// cursor while `has_next_page`, upserting by session id (an item on a
    /// page boundary can repeat; the later copy wins, in first-seen order).
    ///
    /// Returns the entries and the last cursor the server gave, to start
    /// [`FleetClient::watch`] from. Pages of [`ClientOptions::list_page_size`].
    pub async fn list_all(
        &self,
        outpost: &str,
        phase: Option<Phase>,
        acceptor_id: Option<&str>,
    ) -> Result<(Vec<QueueEntry>, Option<String>), FleetError> {
        let query = ListQuery {
            outpost: outpost.to_owned(),
            phase,
            acceptor_id: acceptor_id.map(str::to_owned),
            first: Some(self.inner.options.list_page_size),
            cursor: None,
        };
        self.list_all_from(query).await
    }

    /// [`FleetClient::list_all`] with a full query: its `first` is the page
    /// size and its `cursor` the starting point.
    pub async fn list_all_from(
        &self,
        mut query: ListQuery,
    ) -> Result<(Vec<QueueEntry>, Option<String>), FleetError> {
        let mut entries: Vec<QueueEntry> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut last_cursor = query.cursor.clone();
        for _ in 0..self.inner.options.max_list_pages {
            let page = self.list_page(&query).await?;
            for entry in page.items {
                match index.get(entry.session_id()) {
                    Some(&i) => entries[i] = entry,
                    None => {
                        index.insert(entry.session_id().to_owned(), entries.len());
                        entries.push(entry);
                    }
                }
            }
            if page.cursor.is_some() {
                last_cursor = page.cursor.clone();
            }
            if !page.has_next_page {
                return Ok((entries, last_cursor));
            }
            match page.cursor {
                None => {
                    return Err(FleetError::Paging {
                        route: route::LIST,
                        message: "has_next_page without a cursor".into(),
                    });
                }
                Some(next) if query.cursor.as_deref() == Some(next.as_str()) => {
                    return Err(FleetError::Paging {
                        route: route::LIST,
                        message: "the server returned the same cursor again".into(),
                    });
                }
                Some(next) => query.cursor = Some(next),
            }
        }
        Err(FleetError::Paging {
            route: route::LIST,
            message: format!("more than {} pages", self.inner.options.max_list_pages),
        })
    }

    /// One entry; `None` when the server answers 404.
    pub async fn get(&self, session_id: &str) -> Result<Option<QueueEntry>, FleetError> {
        let url = self.url(&["devins", &http::segment(session_id)?])?;
        let raw = self.execute(Call::get(route::GET, url)).await?;
        match raw.status {
            404 => Ok(None),
            _ if raw.is_success() => {
                let value = self.decode(route::GET, &raw.body)?;
                parse_entry(value)
                    .map(Some)
                    .map_err(|message| FleetError::Decode {
                        route: route::GET,
                        message: self.scrub(&message),
                    })
            }
            _ => Err(self.status_error(route::GET, SCOPE_MACHINE, &raw)),
        }
    }

    /// Claims `session_id` for `acceptor_id` (compare-and-swap on the
    /// server). On success the entry carries `status.connect_token`,
    /// `status.gateway_url` and `status.claim_deadline`.
    ///
    /// Not retried: after a lost response a blind retry could come back as a
    /// 409 that was really our own success. A claim with the same acceptor id
    /// is a renewal, so the caller may simply claim again after a transport
    /// error or timeout; a [`ClaimError::Conflict`] then really means someone
    /// else holds it (or the session runs with another worker).
    pub async fn claim(
        &self,
        session_id: &str,
        acceptor_id: &str,
    ) -> Result<QueueEntry, ClaimError> {
        let url = self.url(&["devins", &http::segment(session_id)?, "claim"])?;
        let raw = self
            .execute(Call::post(route::CLAIM, url, acceptor_body(acceptor_id)))
            .await?;
        match raw.status {
            409 => {
                debug!(route = route::CLAIM, "claim conflict");
                Err(ClaimError::Conflict)
            }
            _ if raw.is_success() => {
                let value = self.decode(route::CLAIM, &raw.body)?;
                parse_entry(value).map_err(|message| {
                    ClaimError::Fleet(FleetError::Decode {
                        route: route::CLAIM,
                        message: self.scrub(&message),
                    })
                })
            }
            _ => Err(self.status_error(route::CLAIM, SCOPE_MACHINE, &raw).into()),
        }
    }

    /// Returns `session_id` to the queue. 409 and 404 are outcomes, not
    /// errors: either way there is nothing left to release. Not retried
    /// automatically; repeating a release is harmless, so the caller may.
    pub async fn release(
        &self,
        session_id: &str,
        acceptor_id: &str,
    ) -> Result<ReleaseOutcome, FleetError> {
        let url = self.url(&["devins", &http::segment(session_id)?, "release"])?;
        let raw = self
            .execute(Call::post(route::RELEASE, url, acceptor_body(acceptor_id)))
            .await?;
        match raw.status {
            409 => Ok(ReleaseOutcome::NotHolder),
            404 => Ok(ReleaseOutcome::Gone),
            _ if raw.is_success() => Ok(ReleaseOutcome::Released),
            _ => Err(self.status_error(route::RELEASE, SCOPE_MACHINE, &raw)),
        }
    }

    // ----- request machinery, shared with watch.rs and outposts.rs -----

    /// `{api_url}/opbeta/outposts/{segments...}`; segments must already be
    /// encoded (fixed names or [`http::segment`] output).
    pub(crate) fn url(&self, segments: &[&str]) -> Result<Url, FleetError> {
        let mut s = format!("{}{API_PREFIX}", self.inner.api_url);
        for segment in segments {
            s.push('/');
            s.push_str(segment);
        }
        Url::parse(&s).map_err(|e| FleetError::InvalidArgument(format!("bad URL: {e}")))
    }

    /// Sends a call, retrying idempotent ones on transport errors, timeouts,
    /// 5xx and 429. Returns the final response whatever its status; callers
    /// map statuses because 404 and 409 mean different things per route.
    pub(crate) async fn execute(&self, call: Call) -> Result<Raw, FleetError> {
        let policy = self.inner.options.retry;
        let attempts = if call.idempotent {
            policy.attempts.max(1)
        } else {
            1
        };
        let mut attempt = 0;
        loop {
            self.inner.stats.request(call.route, attempt > 0);
            let outcome = self.attempt(&call).await;
            let transient = match &outcome {
                Ok(raw) => raw.status >= 500 || raw.status == 429,
                Err(e) => {
                    self.inner.stats.error(call.route, e.kind());
                    e.is_transient()
                }
            };
            if !transient || attempt + 1 >= attempts {
                return outcome;
            }
            let delay = policy.backoff.delay(attempt);
            match &outcome {
                Ok(raw) => debug!(
                    route = call.route,
                    status = raw.status,
                    attempt,
                    ?delay,
                    "retrying"
                ),
                Err(e) => debug!(route = call.route, error = %e, attempt, ?delay, "retrying"),
            }
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    async fn attempt(&self, call: &Call) -> Result<Raw, FleetError> {
        let timeout = self.inner.options.request_timeout;
        let mut req = self
            .inner
            .http
            .request(call.method.clone(), call.url.clone())
            .timeout(timeout)
            .header(header::ACCEPT, "application/json");
        if let Some(body) = &call.json {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| http::transport(call.route, e, timeout))?;
        let status = resp.status().as_u16();
        self.inner.stats.response(call.route, status);
        let body = if resp.status().is_success() {
            http::read_capped(call.route, resp, self.inner.options.max_body_bytes, timeout).await?
        } else {
            // Only a snippet of an error body is ever shown; 4x leaves room
            // for the token to be scrubbed before truncation.
            http::read_prefix(resp, 4 * MAX_SNIPPET_CHARS).await
        };
        Ok(Raw { status, body })
    }

    /// The typed error for a status the route has no special meaning for.
    pub(crate) fn status_error(
        &self,
        route: &'static str,
        scope_hint: &'static str,
        raw: &Raw,
    ) -> FleetError {
        let body = || snippet(&raw.body, &[&self.inner.token]);
        match raw.status {
            401 => FleetError::Unauthorized { route },
            403 => FleetError::Forbidden {
                route,
                scope_hint,
                body: body(),
            },
            404 => FleetError::NotFound { route },
            409 => FleetError::Conflict {
                route,
                body: body(),
            },
            410 if route == route::LIST || route == route::WATCH => {
                FleetError::CursorExpired { route }
            }
            code => FleetError::Status {
                route,
                code,
                body: body(),
            },
        }
    }

    /// Server-influenced text made safe for errors and logs: the token
    /// replaced, control characters flattened, length bounded.
    pub(crate) fn scrub(&self, text: &str) -> String {
        snippet(text.as_bytes(), &[&self.inner.token])
    }

    /// Parses JSON, scrubbing the token from the message in case the server
    /// echoed it into a value serde quotes.
    pub(crate) fn decode<T: DeserializeOwned>(
        &self,
        route: &'static str,
        body: &[u8],
    ) -> Result<T, FleetError> {
        serde_json::from_slice(body).map_err(|e| FleetError::Decode {
            route,
            message: self.scrub(&e.to_string()),
        })
    }
}

impl Call {
    pub(crate) fn get(route: &'static str, url: Url) -> Self {
        Self {
            route,
            method: Method::GET,
            url,
            json: None,
            idempotent: true,
        }
    }

    pub(crate) fn post(route: &'static str, url: Url, json: serde_json::Value) -> Self {
        Self {
            route,
            method: Method::POST,
            url,
            json: Some(json),
            idempotent: false,
        }
    }

    pub(crate) fn delete(route: &'static str, url: Url) -> Self {
        Self {
            route,
            method: Method::DELETE,
            url,
            json: None,
            idempotent: false,
        }
    }
}

fn acceptor_body(acceptor_id: &str) -> serde_json::Value {
    serde_json::to_value(AcceptorBody {
        acceptor_id: acceptor_id.to_owned(),
    })
    .unwrap_or_default()
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

/// Parses and validates one queue entry; the error is a loggable reason.
pub(crate) fn parse_entry(value: serde_json::Value) -> Result<QueueEntry, String> {
    let entry: QueueEntry = serde_json::from_value(value).map_err(|e| e.to_string())?;
    entry.validate().map_err(|e| e.to_string())?;
    Ok(entry)
}

/// A list response, read leniently: `cursor` or `end_cursor`, string or
/// number; missing `items` is an empty page.
pub(crate) struct RawPage {
    pub(crate) items: Vec<serde_json::Value>,
    pub(crate) cursor: Option<String>,
    pub(crate) has_next_page: bool,
    pub(crate) total: Option<u64>,
}

impl RawPage {
    pub(crate) fn from_value(
        route: &'static str,
        value: &serde_json::Value,
    ) -> Result<Self, FleetError> {
        let obj = value.as_object().ok_or_else(|| FleetError::Decode {
            route,
            message: "a list response must be a JSON object".into(),
        })?;
        let items = match obj.get("items") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(items)) => items.clone(),
            Some(_) => {
                return Err(FleetError::Decode {
                    route,
                    message: "`items` is not an array".into(),
                });
            }
        };
        let cursor = ["cursor", "end_cursor"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(cursor_string));
        Ok(Self {
            items,
            cursor,
            has_next_page: obj
                .get("has_next_page")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            total: obj.get("total").and_then(|v| v.as_u64()),
        })
    }
}

/// A cursor is opaque; accept a string or a number, ignore anything else.
pub(crate) fn cursor_string(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn raw_page_accepts_both_cursor_spellings() {
        let p = RawPage::from_value(
            "r",
            &json!({"items": [], "end_cursor": "e", "has_next_page": true}),
        )
        .unwrap();
        assert_eq!(p.cursor.as_deref(), Some("e"));
        assert!(p.has_next_page);
        let p =
            RawPage::from_value("r", &json!({"items": null, "cursor": 17, "total": 3})).unwrap();
        assert_eq!(p.cursor.as_deref(), Some("17"));
        assert_eq!(p.total, Some(3));
        assert!(!p.has_next_page);
        assert!(RawPage::from_value("r", &json!([])).is_err());
        assert!(RawPage::from_value("r", &json!({"items": {}})).is_err());
    }

    #[test]
    fn url_joins_prefix_and_encoded_segments() {
        let c = FleetClient::new(
            "http://127.0.0.1:1/",
            Secret::new("t"),
            ClientOptions::default(),
        )
        .unwrap();
        let seg = http::segment("a/b?c").unwrap();
        let url = c.url(&["devins", &seg, "claim"]).unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:1/opbeta/outposts/devins/a%2Fb%3Fc/claim"
        );
    }
}
