//! The lifecycle API: sandboxes and snapshots, over the HTTP core in
//! `http` that the data plane shares.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::dataplane::SandboxClient;
use crate::error::{Error, Result};
use crate::http::{Http, MAX_JSON_BYTES, REQUEST_TIMEOUT, read_bounded};
use crate::models::{
    CreateSandbox, CreateSnapshot, CreatedSandbox, CreatedSnapshot, ErrorBody, NetworkConfig,
    SandboxInfo, SandboxList, SnapshotInfo, SnapshotList,
};
use crate::retry::{Idempotency, RetryPolicy};
use common::Secret;

/// Tensorlake's public API endpoint.
pub const DEFAULT_API_URL: &str = "https://api.tensorlake.ai";

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

    /// [`Client::new`] with its own retry policy.
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

    /// The API URL the client was made with.
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

    /// One sandbox, by id (or name, which the service also accepts).
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

    /// Asks for a suspended sandbox to run again.
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

    /// One snapshot, by id.
    pub async fn get_snapshot(&self, snapshot_id: &str) -> Result<SnapshotInfo> {
        self.call(
            Method::GET,
            &["snapshots", snapshot_id],
            None::<&()>,
            Idempotency::Idempotent,
        )
        .await
    }

    /// Every snapshot, all pages read.
    pub async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.list_all::<SnapshotList>("snapshots").await
    }

    /// Deletes a snapshot.
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
    /// `POST /sandboxes/{id}/suspend`.
    Suspend,
    /// `POST /sandboxes/{id}/resume`.
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
pub(crate) const MAX_LIFECYCLE_WAIT: Duration = Duration::from_secs(30);

/// The header with which a blocking create asks the service to answer this
/// many milliseconds before the client's own timeout (the SDK's
/// `REQUEST_TIMEOUT_GRACE_HEADER`).
pub(crate) const REQUEST_TIMEOUT_GRACE_HEADER: &str = "X-Tensorlake-Request-Timeout-Grace-Ms";
/// The most grace asked for; a quarter of shorter timeouts instead.
const MAX_GRACE: Duration = Duration::from_secs(5);
const GATEWAY_TIMEOUT: u16 = 504;
const UNPROCESSABLE: u16 = 422;
/// Items each page after the first asks for: the service's maximum.
const LIST_PAGE_LIMIT: &str = "100";

/// The grace a create asks for under a request timeout of `timeout`.
pub(crate) fn create_grace_ms(timeout: Duration) -> u64 {
    MAX_GRACE.min(timeout / 4).as_millis() as u64
}

/// The record a create answered with `status`: any 2xx, or a 504 or 422
/// carrying one (a gateway's bare 504 is an error like any other).
pub(crate) fn created_record(status: u16, body: &[u8]) -> Result<CreatedSandbox> {
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
