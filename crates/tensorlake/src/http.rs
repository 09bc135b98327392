//! The HTTP core the lifecycle and data-plane clients share: bearer
//! authentication, retries as `retry` decides, Tensorlake's error bodies,
//! and bodies read with a bound.

use std::time::Duration;

use reqwest::{RequestBuilder, Response};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::models::ErrorBody;
use crate::retry::{self, Idempotency, RetryPolicy};
use common::Secret;

/// Largest JSON answer read (a list of many sandboxes stays far below).
pub(crate) const MAX_JSON_BYTES: usize = 16 << 20;
/// Largest error body kept for the message.
const MAX_ERROR_BYTES: usize = 16 << 10;
/// Bounds one request (a follow stream excepted); the SDKs allow long
/// creates.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Shared by the lifecycle and data-plane clients.
pub(crate) struct Http {
    pub client: reqwest::Client,
    pub api_key: Secret,
    pub retry: RetryPolicy,
}

impl Http {
    /// Sends the request `build` makes, retrying as [`retry`] decides, and
    /// returns the first success (2xx) or the last error.
    pub(crate) async fn send(
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
    pub(crate) async fn send_with(
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

    pub(crate) async fn json<T: DeserializeOwned>(
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
