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
        self.send_with(idem, Some(REQUEST_TIMEOUT), build).await
    }

    /// [`Http::send`] with its own bound on the whole exchange (`None` for
    /// a stream that lasts as long as what it follows).
    pub async fn send_with(
        &self,
        idem: Idempotency,
        timeout: Option<Duration>,
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
                Ok(response) if response.status().is_success() => return Ok(response),
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
            tracing::debug!(attempt, ?wait, error = %error, "retrying a Tensorlake request");
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
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("api_url", &self.api_url.as_str())
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
        Ok(Self {
            http: Arc::new(Http {
                client,
                api_key,
                retry,
            }),
            api_url,
        })
    }

    pub fn api_url(&self) -> &url::Url {
        &self.api_url
    }

    /// Whether the API is on this machine (the mock): its sandboxes then
    /// run here too.
    pub fn is_loopback(&self) -> bool {
        match self.api_url.host() {
            Some(url::Host::Domain(d)) => d == "localhost",
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            None => false,
        }
    }

    fn url(&self, segments: &[&str]) -> url::Url {
        let mut url = self.api_url.clone();
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

    /// Creates a sandbox (`pending` at first; poll [`Client::get_sandbox`]).
    pub async fn create_sandbox(&self, request: &CreateSandbox) -> Result<CreatedSandbox> {
        self.call(
            Method::POST,
            &["sandboxes"],
            Some(request),
            Idempotency::NotIdempotent,
        )
        .await
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

    pub async fn list_sandboxes(&self) -> Result<Vec<SandboxInfo>> {
        let list: SandboxList = self
            .call(
                Method::GET,
                &["sandboxes"],
                None::<&()>,
                Idempotency::Idempotent,
            )
            .await?;
        Ok(list.sandboxes)
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
        let list: SnapshotList = self
            .call(
                Method::GET,
                &["snapshots"],
                None::<&()>,
                Idempotency::Idempotent,
            )
            .await?;
        Ok(list.snapshots)
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

/// `404` as `None`.
pub(crate) fn found<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.status() == Some(StatusCode::NOT_FOUND.as_u16()) => Ok(None),
        Err(e) => Err(e),
    }
}
