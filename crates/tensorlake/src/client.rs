//! The lifecycle API and the HTTP core (auth, retries, bounded bodies)
//! shared with the data plane.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::dataplane::SandboxClient;
use crate::error::{Error, Result};
use crate::models::{
    CreateSandbox, CreateSnapshot, CreatedSandbox, CreatedSnapshot, ErrorBody, NetworkConfig,
    SandboxInfo, SandboxList, SnapshotInfo, SnapshotList,
};
use crate::retry::{self, Idempotency, RetryPolicy};
use common::Secret;

/// Tensorlake's public API endpoint.
pub const DEFAULT_API_URL: &str = "https://api.tensorlake.ai";

/// Largest JSON answer read (a list of many sandboxes stays far below).
pub(crate) const MAX_JSON_BYTES: usize = 16 << 20;
/// Largest error body kept for the message.
const MAX_ERROR_BYTES: usize = 16 << 10;
/// Bounds one request (a follow stream excepted); the SDKs allow long
/// creates.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Shared by the lifecycle and data-plane clients.
pub(crate) struct Http {
    pub client: reqwest::Client,
    pub api_key: Secret,
    pub retry: RetryPolicy,
}

impl Http {
    /// Sends the request `build` makes, retrying as [`retry`] decides, and
    /// returns the first success (2xx) or the last error.
    pub async fn send(
        &self,
        idem: Idempotency,
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<Response> {
        self.send_with(idem, Some(REQUEST_TIMEOUT), &[], build)
            .await
    }

    /// [`Http::send`] with its own bound on the whole exchange (`None` for
    /// a stream that lasts as long as what it follows), returning answers
    /// with a status in `accept` as they are (neither retried nor errors).
    pub async fn send_with(
        &self,
        idem: Idempotency,
        timeout: Option<Duration>,
        accept: &[u16],
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<Response> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let last = attempt >= self.retry.max_attempts;
            let mut request = build(&self.client).bearer_auth(self.api_key.expose());
            if let Some(timeout) = timeout {
                request = request.timeout(timeout);
            }
            let (error, retry_after) = match request.send().await {
                Ok(response)
                    if response.status().is_success()
                        || accept.contains(&response.status().as_u16()) =>
                {
                    return Ok(response);
                }
                Ok(response) => {
                    let retry_after = retry_after(&response);
                    let error = error_from(response).await;
                    let Error::Api { status, code, .. } = &error else {
                        return Err(error);
                    };
                    if last || !retry::retryable_status(*status, code.as_deref(), idem) {
                        return Err(error);
                    }
                    (error, retry_after)
                }
                Err(e) => {
                    if last || !retry::retryable_transport(e.is_connect(), idem) || e.is_timeout() {
                        return Err(Error::transport(e));
                    }
                    (Error::transport(e), None)
                }
            };
            let wait = retry::backoff(&self.retry, attempt, rand::random::<f64>(), retry_after);
            tracing::debug!(attempt, wait_ms = wait.as_millis() as u64, error = %error, "retrying a Tensorlake request");
            tokio::time::sleep(wait).await;
        }
    }

    pub async fn json<T: DeserializeOwned>(
        &self,
        idem: Idempotency,
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
    ) -> Result<T> {
        let response = self.send(idem, build).await?;
        let bytes = read_bounded(response, MAX_JSON_BYTES, "JSON answer").await?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))
    }
}

fn retry_after(response: &Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    value
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(Duration::from_secs)
}

async fn error_from(response: Response) -> Error {
    let status = response.status();
    let body = read_bounded(response, MAX_ERROR_BYTES, "error")
        .await
        .unwrap_or_default();
    let parsed: ErrorBody = serde_json::from_slice(&body).unwrap_or_default();
    let message = parsed
        .error
        .or(parsed.message)
        .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
    Error::Api {
        status: status.as_u16(),
        code: parsed.code.map(|c| c.chars().take(128).collect()),
        message: message.chars().take(2048).collect(),
    }
}

/// Reads a body, refusing more than `limit` bytes.
pub(crate) async fn read_bounded(
    mut response: Response,
    limit: usize,
    what: &'static str,
) -> Result<Vec<u8>> {
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return Err(Error::TooLarge { what, limit });
    }
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Error::transport)? {
        if out.len() + chunk.len() > limit {
            return Err(Error::TooLarge { what, limit });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Tensorlake's lifecycle API, authenticated with an API key.
#[derive(Clone)]
pub struct Client {
    pub(crate) http: Arc<Http>,
    pub(crate) api_url: url::Url,
    /// Where `/sandboxes` and `/snapshots` go (see [`crate::urls`]).
    pub(crate) lifecycle_url: url::Url,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("api_url", &self.api_url.as_str())
            .field("lifecycle_url", &self.lifecycle_url.as_str())
            .finish()
    }
}

impl Client {
    /// A client of the API at `api_url` (for example [`DEFAULT_API_URL`]).
    pub fn new(api_url: &str, api_key: Secret) -> Result<Self> {
        Self::with_retry(api_url, api_key, RetryPolicy::default())
    }

    pub fn with_retry(api_url: &str, api_key: Secret, retry: RetryPolicy) -> Result<Self> {
        let api_url = url::Url::parse(api_url)
            .map_err(|e| Error::Invalid(format!("Tensorlake API URL {api_url:?}: {e}")))?;
        if !matches!(api_url.scheme(), "http" | "https") || api_url.host_str().is_none() {
            return Err(Error::Invalid(format!(
                "Tensorlake API URL {api_url} must be http(s)://host"
            )));
        }
        if api_key.is_empty() {
            return Err(Error::Invalid("the Tensorlake API key is empty".into()));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .build()
            .map_err(|e| Error::Invalid(format!("building the HTTP client: {e}")))?;
        let lifecycle_url = crate::urls::sandbox_api_url(&api_url, None)?;
        Ok(Self {
            http: Arc::new(Http {
                client,
                api_key,
                retry,
            }),
            api_url,
            lifecycle_url,
        })
    }

    /// Sends the lifecycle calls to `explicit` (`TENSORLAKE_SANDBOX_API_URL`)
    /// instead of the host derived from the API URL; `None` keeps that.
    pub fn with_sandbox_api_url(mut self, explicit: Option<&str>) -> Result<Self> {
        self.lifecycle_url = crate::urls::sandbox_api_url(&self.api_url, explicit)?;
        Ok(self)
    }

    pub fn api_url(&self) -> &url::Url {
        &self.api_url
    }

    /// The base URL of the lifecycle calls.
    pub fn sandbox_api_url(&self) -> &url::Url {
        &self.lifecycle_url
    }

    /// Whether the API is on this machine (the mock): its sandboxes then
    /// run here too.
    pub fn is_loopback(&self) -> bool {
        crate::urls::is_loopback(&self.api_url)
    }

    fn url(&self, segments: &[&str]) -> url::Url {
        let mut url = self.lifecycle_url.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&(impl Serialize + Sync)>,
        idem: Idempotency,
    ) -> Result<T> {
        let url = self.url(segments);
        self.http
            .json(idem, |c| {
                let request = c.request(method.clone(), url.clone());
                match body {
                    Some(body) => request.json(body),
                    None => request,
                }
            })
            .await
    }

    async fn call_empty(&self, method: Method, segments: &[&str]) -> Result<()> {
        let url = self.url(segments);
        let response = self
            .http
            .send(Idempotency::Idempotent, |c| {
                c.request(method.clone(), url.clone())
                    .header(reqwest::header::CONTENT_LENGTH, 0)
            })
            .await?;
        drop(response);
        Ok(())
    }

    /// Creates a sandbox, the service waiting for it to run. Its answer is a
    /// record whatever happened: `running`; `timeout` (HTTP 504: the wait
    /// ran out, the sandbox stays `pending` in the queue: poll
    /// [`Client::get_sandbox`], never create again); `failed` (HTTP 422: it
    /// will never run). A 504 or 422 without a record is an error.
    pub async fn create_sandbox(&self, request: &CreateSandbox) -> Result<CreatedSandbox> {
        let url = self.url(&["sandboxes"]);
        let grace = create_grace_ms(REQUEST_TIMEOUT);
        let response = self
            .http
            .send_with(
                Idempotency::NotIdempotent,
                Some(REQUEST_TIMEOUT),
                &[GATEWAY_TIMEOUT, UNPROCESSABLE],
                |c| {
                    c.post(url.clone())
                        .header(REQUEST_TIMEOUT_GRACE_HEADER, grace)
                        .json(request)
                },
            )
            .await?;
        let status = response.status().as_u16();
        let bytes = read_bounded(response, MAX_JSON_BYTES, "JSON answer").await?;
        created_record(status, &bytes)
    }

    pub async fn get_sandbox(&self, sandbox_id: &str) -> Result<SandboxInfo> {
        self.call(
            Method::GET,
            &["sandboxes", sandbox_id],
            None::<&()>,
            Idempotency::Idempotent,
        )
        .await
    }

    /// The live sandbox holding `name`, if any: the service takes a name
    /// wherever it takes an id, so no listing is needed.
    pub async fn find_by_name(&self, name: &str) -> Result<Option<SandboxInfo>> {
        if name.is_empty() || name.contains('/') {
            return Err(Error::Invalid(format!("sandbox name {name:?}")));
        }
        Ok(found(self.get_sandbox(name).await)?
            .filter(|s| s.name.as_deref() == Some(name) && !s.status.is_final()))
    }

    /// Every sandbox, following the listing's cursor page by page. To find
    /// one by name, [`Client::get_sandbox`] takes the name.
    pub async fn list_sandboxes(&self) -> Result<Vec<SandboxInfo>> {
        self.list_all::<SandboxList>("sandboxes").await
    }

    /// Every item of a paged listing: the first request carries no query,
    /// later ones the cursor the previous page gave and the page size.
    async fn list_all<P: crate::models::Page>(&self, what: &str) -> Result<Vec<P::Item>> {
        let mut items = Vec::new();
        let mut cursors = crate::models::Cursors::default();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = self.url(&[what]);
            if let Some(cursor) = &cursor {
                url.query_pairs_mut()
                    .append_pair("cursor", cursor)
                    .append_pair("limit", LIST_PAGE_LIMIT);
            }
            let page: P = self
                .http
                .json(Idempotency::Idempotent, |c| c.get(url.clone()))
                .await?;
            let (page_items, next) = page.into_page();
            items.extend(page_items);
            match cursors
                .next(next)
                .map_err(|e| Error::Decode(format!("listing {what}: {e}")))?
            {
                Some(next) => cursor = Some(next),
                None => return Ok(items),
            }
        }
    }

    /// Terminates and removes a sandbox.
    pub async fn delete_sandbox(&self, sandbox_id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &["sandboxes", sandbox_id])
            .await
    }

    /// Suspends a named sandbox, keeping memory and disk.
    pub async fn suspend_sandbox(&self, sandbox_id: &str) -> Result<()> {
        self.call_empty(Method::POST, &["sandboxes", sandbox_id, "suspend"])
            .await
    }

    pub async fn resume_sandbox(&self, sandbox_id: &str) -> Result<()> {
        self.call_empty(Method::POST, &["sandboxes", sandbox_id, "resume"])
            .await
    }

    /// Suspends (`action` `suspend`) or resumes (`resume`) with the
    /// service holding the request until it is done, for at most `wait`
    /// (the service caps it at 30 s): `true` when it answered done (200),
    /// `false` when its wait ran out and the change goes on (202).
    pub async fn change_and_wait(
        &self,
        sandbox_id: &str,
        action: LifecycleChange,
        wait: Duration,
    ) -> Result<bool> {
        let mut url = self.url(&["sandboxes", sandbox_id, action.segment()]);
        let wait_ms = wait.min(MAX_LIFECYCLE_WAIT).as_millis().to_string();
        url.query_pairs_mut().append_pair("wait_ms", &wait_ms);
        let response = self
            .http
            .send(Idempotency::Idempotent, |c| {
                c.post(url.clone())
                    .header(reqwest::header::CONTENT_LENGTH, 0)
            })
            .await?;
        Ok(response.status() == StatusCode::OK)
    }

    /// Replaces a running sandbox's egress rules (`PATCH /sandboxes/{id}`).
    pub async fn update_network(&self, sandbox_id: &str, network: &NetworkConfig) -> Result<()> {
        let url = self.url(&["sandboxes", sandbox_id]);
        let body = serde_json::json!({ "network": network });
        self.http
            .send(Idempotency::Idempotent, |c| {
                c.request(Method::PATCH, url.clone()).json(&body)
            })
            .await?;
        Ok(())
    }

    /// Starts a snapshot (`in_progress`; poll [`Client::get_snapshot`]).
    pub async fn snapshot_sandbox(
        &self,
        sandbox_id: &str,
        request: &CreateSnapshot,
    ) -> Result<CreatedSnapshot> {
        self.call(
            Method::POST,
            &["sandboxes", sandbox_id, "snapshot"],
            Some(request),
            Idempotency::NotIdempotent,
        )
        .await
    }

    pub async fn get_snapshot(&self, snapshot_id: &str) -> Result<SnapshotInfo> {
        self.call(
            Method::GET,
            &["snapshots", snapshot_id],
            None::<&()>,
            Idempotency::Idempotent,
        )
        .await
    }

    pub async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.list_all::<SnapshotList>("snapshots").await
    }

    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &["snapshots", snapshot_id])
            .await
    }

    /// The data-plane client of one sandbox. `sandbox_url` is the proxy URL
    /// the server gave for it; without one the proxy is derived from the
    /// API URL the way the SDKs do (`api.X` -> `sandbox.X`; the API itself
    /// when it is local).
    pub fn sandbox(&self, sandbox_id: &str, sandbox_url: Option<&str>) -> Result<SandboxClient> {
        let proxy = match sandbox_url.filter(|u| !u.trim().is_empty()) {
            Some(url) => url::Url::parse(url)
                .map_err(|e| Error::Decode(format!("sandbox_url {url:?}: {e}")))?,
            None => self.default_proxy_url(),
        };
        SandboxClient::new(self.http.clone(), proxy, sandbox_id)
    }

    fn default_proxy_url(&self) -> url::Url {
        let mut url = self.api_url.clone();
        if let Some(rest) = url.host_str().and_then(|h| h.strip_prefix("api.")) {
            let host = format!("sandbox.{rest}");
            let _ = url.set_host(Some(&host));
        }
        url
    }
}

/// A suspend or a resume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifecycleChange {
    Suspend,
    Resume,
}

impl LifecycleChange {
    fn segment(self) -> &'static str {
        match self {
            Self::Suspend => "suspend",
            Self::Resume => "resume",
        }
    }
}

/// The longest the service holds a suspend or resume open.
pub const MAX_LIFECYCLE_WAIT: Duration = Duration::from_secs(30);

/// The header with which a blocking create asks the service to answer this
/// many milliseconds before the client's own timeout (the SDK's
/// `REQUEST_TIMEOUT_GRACE_HEADER`).
pub const REQUEST_TIMEOUT_GRACE_HEADER: &str = "X-Tensorlake-Request-Timeout-Grace-Ms";
/// The most grace asked for; a quarter of shorter timeouts instead.
const MAX_GRACE: Duration = Duration::from_secs(5);
const GATEWAY_TIMEOUT: u16 = 504;
const UNPROCESSABLE: u16 = 422;
/// Items each page after the first asks for: the service's maximum.
const LIST_PAGE_LIMIT: &str = "100";

/// The grace a create asks for under a request timeout of `timeout`.
pub fn create_grace_ms(timeout: Duration) -> u64 {
    MAX_GRACE.min(timeout / 4).as_millis() as u64
}

/// The record a create answered with `status`: any 2xx, or a 504 or 422
/// carrying one (a gateway's bare 504 is an error like any other).
pub fn created_record(status: u16, body: &[u8]) -> Result<CreatedSandbox> {
    match serde_json::from_slice::<CreatedSandbox>(body) {
        Ok(created) => Ok(created),
        Err(e) if (200..300).contains(&status) => Err(Error::Decode(e.to_string())),
        Err(_) => {
            let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
            Err(Error::Api {
                status,
                code: parsed.code.map(|c| c.chars().take(128).collect()),
                message: parsed
                    .error
                    .or(parsed.message)
                    .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(2048).collect()),
            })
        }
    }
}

/// `404` as `None`.
pub(crate) fn found<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.status() == Some(StatusCode::NOT_FOUND.as_u16()) => Ok(None),
        Err(e) => Err(e),
    }
}
