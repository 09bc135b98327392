//! The request machinery every fleet call goes through, shared with
//! [`crate::watch`] and the outposts calls: URL building, one bounded attempt
//! (timeout, capped body), retries of idempotent calls, counters, and turning
//! an unexpected status or a bad body into a typed error with the token
//! scrubbed out.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use reqwest::Method;
use reqwest::header;
use serde::de::DeserializeOwned;
use tracing::debug;
use url::Url;

use super::base::{API_PREFIX, FleetClient};
use crate::error::{FleetError, MAX_SNIPPET_CHARS, snippet};
use crate::http;
use crate::retry::parse_retry_after;
use crate::stats::route;

/// A response as the request machinery returns it: the status and either the
/// whole (capped) body of a success or a prefix of an error body.
#[derive(Debug)]
pub(crate) struct Raw {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
    /// The server's `Retry-After` on a 429 or 503, capped.
    pub(crate) retry_after: Option<Duration>,
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
    /// 5xx and 429. A 429 or 503 that says when to come back
    /// (`Retry-After`) is waited out, at least that long, and is retried for
    /// any call: the server refused it without doing it. Returns the final
    /// response whatever its status; callers map statuses because 404 and
    /// 409 mean different things per route.
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
            let (transient, retry_after) = match &outcome {
                Ok(raw) => (raw.status >= 500 || raw.status == 429, raw.retry_after),
                Err(e) => {
                    self.inner.stats.error(call.route, e.kind());
                    (e.is_transient(), None)
                }
            };
            let attempts = match retry_after {
                Some(_) => policy.attempts.max(1),
                None => attempts,
            };
            if !transient || attempt + 1 >= attempts {
                return outcome;
            }
            let delay = policy
                .backoff
                .delay(attempt)
                .max(retry_after.unwrap_or_default());
            match &outcome {
                Ok(raw) => debug!(
                    route = call.route,
                    status = raw.status,
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    "retrying"
                ),
                Err(e) => {
                    debug!(route = call.route, error = %e, attempt, delay_ms = delay.as_millis() as u64, "retrying")
                }
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
        let retry_after = match status {
            429 | 503 => resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, SystemTime::now())),
            _ => None,
        };
        let body = if resp.status().is_success() {
            http::read_capped(call.route, resp, self.inner.options.max_body_bytes, timeout).await?
        } else {
            // Only a snippet of an error body is ever shown; 4x leaves room
            // for the token to be scrubbed before truncation.
            http::read_prefix(resp, 4 * MAX_SNIPPET_CHARS).await
        };
        Ok(Raw {
            status,
            body,
            retry_after,
        })
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
                retry_after: raw.retry_after,
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

#[cfg(test)]
mod tests {
    use crate::client::{ClientOptions, FleetClient};
    use crate::http;
    use common::Secret;

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
