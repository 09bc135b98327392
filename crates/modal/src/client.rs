//! A thin client for Modal's gRPC API: authentication metadata on every
//! call, TLS for `https` URLs, and retries with backoff on the codes Modal's
//! own clients retry.

use std::future::Future;
use std::time::Duration;

use common::Secret;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

use crate::router::{RouterCache, RouterRpc};
use crate::wire::{self, modal_client_client::ModalClientClient};

tokio::task_local! {
    /// The idempotency key and attempt number of the call being made, put
    /// on the request by [`Auth`] as Modal's client does.
    static ATTEMPT: (AsciiMetadataValue, u32);
}

/// A fresh `x-idempotency-key`: one per logical call, the same on each of
/// its retries, so the service can recognise a repeat.
fn idempotency_key() -> AsciiMetadataValue {
    let key = format!("{:032x}", rand::random::<u128>());
    AsciiMetadataValue::try_from(key).expect("hex is ASCII")
}

/// Where Modal's API lives unless `MODAL_API_URL` says otherwise.
pub(crate) const DEFAULT_API_URL: &str = "https://api.modal.com";

/// A Modal token pair (`MODAL_TOKEN_ID`, `MODAL_TOKEN_SECRET`). Neither part
/// is ever printed: `Debug` shows only that they are set.
#[derive(Clone)]
pub struct Credentials {
    /// `MODAL_TOKEN_ID` (`ak-...`).
    pub token_id: Secret,
    /// `MODAL_TOKEN_SECRET` (`as-...`).
    pub token_secret: Secret,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials([redacted])")
    }
}

/// How often and how patiently a failed call is retried.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The wait after the first failure; doubled after each one.
    pub initial_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 6,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1`: the shared doubling,
    /// capped, full-jitter backoff, so many clients do not retry in step.
    pub fn backoff(&self, attempt: u32) -> Duration {
        common::Backoff::new(self.initial_backoff, self.max_backoff).delay(attempt)
    }
}

/// Everything needed to talk to Modal.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// `https://api.modal.com`, or `http://` for a local mock.
    pub api_url: String,
    /// The token sent with every call.
    pub credentials: Credentials,
    /// How failed calls are retried.
    pub retry: RetryPolicy,
}

/// Adds Modal's metadata to every request. The token values are marked
/// sensitive so HTTP/2 never indexes them.
#[derive(Clone)]
pub struct Auth {
    headers: Vec<(&'static str, AsciiMetadataValue)>,
}

impl Auth {
    fn new(credentials: &Credentials) -> anyhow::Result<Self> {
        let secret = |value: &Secret, name: &str| -> anyhow::Result<AsciiMetadataValue> {
            let mut v = AsciiMetadataValue::try_from(value.expose())
                .map_err(|_| anyhow::anyhow!("{name} holds characters a header cannot carry"))?;
            v.set_sensitive(true);
            Ok(v)
        };
        let plain = |value: &str| AsciiMetadataValue::try_from(value).expect("ASCII constant");
        Ok(Self {
            headers: vec![
                (
                    wire::HEADER_TOKEN_ID,
                    secret(&credentials.token_id, "MODAL_TOKEN_ID")?,
                ),
                (
                    wire::HEADER_TOKEN_SECRET,
                    secret(&credentials.token_secret, "MODAL_TOKEN_SECRET")?,
                ),
                (wire::HEADER_CLIENT_VERSION, plain(wire::CLIENT_VERSION)),
                (
                    wire::HEADER_CLIENT_TYPE,
                    plain(&(wire::CLIENT_TYPE as i32).to_string()),
                ),
            ],
        })
    }

    fn apply(&self, metadata: &mut MetadataMap) {
        for (name, value) in &self.headers {
            metadata.insert(*name, value.clone());
        }
        let _ = ATTEMPT.try_with(|(key, attempt)| {
            metadata.insert(wire::HEADER_IDEMPOTENCY_KEY, key.clone());
            metadata.insert(
                wire::HEADER_RETRY_ATTEMPT,
                AsciiMetadataValue::from(*attempt),
            );
        });
    }
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.apply(request.metadata_mut());
        Ok(request)
    }
}

/// The generated client with `Auth` (the credentials' interceptor) in front.
pub type Rpc = ModalClientClient<InterceptedService<Channel, Auth>>;

/// A connection to Modal. Cheap to clone; calls share one HTTP/2 channel.
#[derive(Clone)]
pub struct Client {
    rpc: Rpc,
    retry: RetryPolicy,
    api_url: String,
    routers: RouterCache,
}

impl Client {
    /// Prepares a client; the connection is opened on first use, so a
    /// client for an unreachable URL is made without error.
    pub fn new(config: &ClientConfig) -> anyhow::Result<Self> {
        let url = url::Url::parse(&config.api_url)
            .map_err(|e| anyhow::anyhow!("MODAL_API_URL {:?}: {e}", config.api_url))?;
        let mut endpoint = Endpoint::from_shared(config.api_url.clone())
            .map_err(|e| anyhow::anyhow!("MODAL_API_URL {:?}: {e}", config.api_url))?
            .connect_timeout(Duration::from_secs(20))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_while_idle(true);
        match url.scheme() {
            "https" => {
                endpoint = endpoint
                    .tls_config(ClientTlsConfig::new().with_webpki_roots())
                    .map_err(|e| anyhow::anyhow!("TLS for {}: {e}", config.api_url))?;
            }
            "http" => {}
            other => anyhow::bail!(
                "MODAL_API_URL {:?}: scheme {other:?} is not http or https",
                config.api_url
            ),
        }
        let channel = endpoint.connect_lazy();
        let rpc = ModalClientClient::with_interceptor(channel, Auth::new(&config.credentials)?)
            .max_decoding_message_size(64 * 1024 * 1024);
        Ok(Self {
            rpc,
            retry: config.retry,
            api_url: config.api_url.clone(),
            routers: RouterCache::default(),
        })
    }

    /// The generated client, for calls that must not be retried blindly.
    pub fn rpc(&self) -> Rpc {
        self.rpc.clone()
    }

    /// Runs `call` until it succeeds, fails with a code that is not
    /// retryable, or the attempts run out. For calls that are safe to
    /// repeat (reads, idempotent writes).
    pub async fn retrying<T, F, Fut>(&self, what: &'static str, call: F) -> Result<T, Status>
    where
        F: FnMut(Rpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.retrying_when(what, wire::is_retryable, call).await
    }

    /// [`Client::retrying`] for calls that make something (a sandbox, an
    /// exec, a snapshot): safe to repeat because every attempt carries the
    /// same `x-idempotency-key`, and also repeated on RESOURCE_EXHAUSTED.
    pub async fn retrying_creation<T, F, Fut>(
        &self,
        what: &'static str,
        call: F,
    ) -> Result<T, Status>
    where
        F: FnMut(Rpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.retrying_when(what, wire::is_retryable_creation, call)
            .await
    }

    /// The command router of a running task: fetched once
    /// (`SandboxGetCommandRouterAccess`), then kept.
    pub async fn router(&self, task_id: &str) -> Result<RouterRpc, Status> {
        if let Some(rpc) = self.routers.get(task_id) {
            return Ok(rpc);
        }
        use wire::sandbox_get_command_router_access_request::Target;
        let request = wire::SandboxGetCommandRouterAccessRequest {
            target: Some(Target::TaskId(task_id.to_owned())),
        };
        let access = self
            .retrying("SandboxGetCommandRouterAccess", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_get_command_router_access(request).await }
            })
            .await?;
        let rpc = crate::router::connect(&self.api_url, &access.url, &Secret::new(access.jwt))?;
        self.routers.put(task_id, rpc.clone());
        Ok(rpc)
    }

    /// Runs a command router call of `task_id` until it succeeds, fails
    /// with a code that is not retryable, or the attempts run out. A
    /// refused token is fetched anew once (router tokens expire).
    pub async fn routed<T, F, Fut>(
        &self,
        what: &'static str,
        task_id: &str,
        mut call: F,
    ) -> Result<T, Status>
    where
        F: FnMut(RouterRpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let mut attempt = 0;
        let mut refreshed = false;
        loop {
            let rpc = self.router(task_id).await?;
            match call(rpc).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if status.code() == Code::Unauthenticated && !refreshed => {
                    self.routers.forget(task_id);
                    refreshed = true;
                }
                Err(status)
                    if wire::is_retryable(status.code()) && attempt + 1 < self.retry.attempts =>
                {
                    let wait = self.retry.backoff(attempt);
                    tracing::debug!(rpc = what, code = %status.code(), attempt, wait_ms = wait.as_millis() as u64, "command router call failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(status) => return Err(status),
            }
        }
    }

    async fn retrying_when<T, F, Fut>(
        &self,
        what: &'static str,
        retryable: fn(tonic::Code) -> bool,
        mut call: F,
    ) -> Result<T, Status>
    where
        F: FnMut(Rpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let mut attempt = 0;
        let key = idempotency_key();
        loop {
            let answer = ATTEMPT
                .scope((key.clone(), attempt), call(self.rpc.clone()))
                .await;
            match answer {
                Ok(response) => {
                    log_warnings(what, response.metadata());
                    return Ok(response.into_inner());
                }
                Err(status) if retryable(status.code()) && attempt + 1 < self.retry.attempts => {
                    let wait = self.retry.backoff(attempt);
                    tracing::debug!(rpc = what, code = %status.code(), attempt, wait_ms = wait.as_millis() as u64, "Modal call failed; retrying");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(status) => {
                    log_warnings(what, status.metadata());
                    return Err(status);
                }
            }
        }
    }
}

/// Logs the `x-modal-warning`s the service attached to an answer (Modal's
/// client prints them: deprecations, quotas).
fn log_warnings(what: &str, metadata: &MetadataMap) {
    for value in metadata.get_all(wire::HEADER_WARNING) {
        if let Ok(text) = value.to_str() {
            let text = percent_decode(text);
            tracing::warn!(rpc = what, warning = %text, "Modal warns");
        }
    }
}

/// Modal percent-encodes its warnings; undoes that, leaving bad escapes.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_under_the_doubling_capped_ceiling() {
        let policy = RetryPolicy {
            attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for _ in 0..50 {
            assert!(policy.backoff(0) <= Duration::from_millis(100));
            assert!(policy.backoff(2) <= Duration::from_millis(400));
            assert!(policy.backoff(30) <= Duration::from_secs(1));
        }
    }

    #[test]
    fn warnings_are_percent_decoded() {
        assert_eq!(percent_decode("quota%20at%2090%25"), "quota at 90%");
        assert_eq!(percent_decode("bad %zz and %4"), "bad %zz and %4");
        assert_eq!(percent_decode("caf%C3%A9"), "café");
    }

    #[test]
    fn credentials_never_print() {
        let c = Credentials {
            token_id: Secret::new("ak-visible"),
            token_secret: Secret::new("as-visible"),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("visible"), "{shown}");
    }

    #[test]
    fn only_http_and_https_urls() {
        let config = |url: &str| ClientConfig {
            api_url: url.into(),
            credentials: Credentials {
                token_id: Secret::new("a"),
                token_secret: Secret::new("b"),
            },
            retry: RetryPolicy::default(),
        };
        assert!(Client::new(&config("ftp://api.modal.com")).is_err());
        assert!(Client::new(&config("not a url")).is_err());
    }
}
