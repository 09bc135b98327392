//! The partner connection flow (OAuth 2.0 authorization code with PKCE,
//! RFC 7636), used by `garrison connect` to obtain an outpost and a token
//! without pasting credentials.
//!
//! 1. [`Pkce::generate`] a verifier and its challenge.
//! 2. Send the admin's browser to [`connect_url`].
//! 3. The browser returns to the callback with `?code=...`
//!    ([`callback_code`] reads it).
//! 4. [`exchange_code`] trades the code and verifier for a
//!    [`ConnectionToken`].

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng;
use sha2::{Digest, Sha256};
use url::Url;

use crate::error::{FleetError, MAX_SNIPPET_CHARS, snippet};
use crate::http;
use crate::stats::route;
use crate::wire::{ConnectionToken, Platform};
use common::Secret;

/// Garrison's fixed callback: a loopback port and path that do not change
/// between runs, so the URL can be put on Devin's callback allowlist once
/// (the partners page: "Every `callback_url` you use must be on Devin's
/// allowlist ... A URL that is not on the list is rejected").
pub const DEFAULT_CALLBACK_URL: &str = "http://127.0.0.1:8791/devin/outpost-callback";

/// Length of a generated verifier (RFC 7636 allows 43 to 128).
pub const VERIFIER_LEN: usize = 64;

/// The RFC 7636 "unreserved" alphabet.
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~";

/// Limits for the one-shot exchange request.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
const EXCHANGE_MAX_BODY: usize = 1 << 20;

/// A PKCE pair. The verifier stays on this machine until the exchange; only
/// the challenge goes to the browser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pkce {
    /// The secret the challenge was made from; sent with the code.
    pub verifier: Secret,
    /// `base64url_nopad(sha256(verifier))`.
    pub challenge: String,
}

impl Pkce {
    /// A fresh verifier of [`VERIFIER_LEN`] characters from the thread-local
    /// CSPRNG (ChaCha, seeded from the OS), and its S256 challenge.
    pub fn generate() -> Self {
        let mut rng = rand::rng();
        let verifier: String = (0..VERIFIER_LEN)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect();
        Self::from_verifier(Secret::new(verifier))
    }

    /// The pair for a given verifier.
    pub fn from_verifier(verifier: Secret) -> Self {
        let challenge = challenge(verifier.expose());
        Self {
            verifier,
            challenge,
        }
    }
}

/// `base64url_nopad(sha256(verifier))` (the S256 method).
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Failure of the connection flow.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The code is expired, already used, or does not match the verifier.
    /// Terminal: start the flow again with a new [`Pkce`].
    #[error("invalid_grant: the authorization code was refused; start the connection again ({})", description.as_deref().unwrap_or("no description"))]
    InvalidGrant {
        /// The server's `error_description`.
        description: Option<String>,
    },
    #[error("invalid_request: {}", description.as_deref().unwrap_or("no description"))]
    /// `invalid_request`.
    InvalidRequest {
        /// The server's `error_description`.
        description: Option<String>,
    },
    #[error("invalid_client: {}", description.as_deref().unwrap_or("no description"))]
    /// `invalid_client`.
    InvalidClient {
        /// The server's `error_description`.
        description: Option<String>,
    },
    #[error("unauthorized_client: {}", description.as_deref().unwrap_or("no description"))]
    /// `unauthorized_client`.
    UnauthorizedClient {
        /// The server's `error_description`.
        description: Option<String>,
    },
    #[error("unsupported_grant_type: {}", description.as_deref().unwrap_or("no description"))]
    /// `unsupported_grant_type`.
    UnsupportedGrantType {
        /// The server's `error_description`.
        description: Option<String>,
    },
    #[error("invalid_scope: {}", description.as_deref().unwrap_or("no description"))]
    /// `invalid_scope`.
    InvalidScope {
        /// The server's `error_description`.
        description: Option<String>,
    },
    /// Another RFC 6749 error code, or one from the callback (`access_denied`).
    #[error("{error}: {}", description.as_deref().unwrap_or("no description"))]
    OAuth {
        /// The error code.
        error: String,
        /// The server's `error_description`.
        description: Option<String>,
    },
    /// A malformed URL or callback, transport failure, unexpected status, ...
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

impl ConnectError {
    /// Builds the typed error for an RFC 6749 `error` code.
    fn from_code(error: &str, description: Option<String>) -> Self {
        match error {
            "invalid_grant" => Self::InvalidGrant { description },
            "invalid_request" => Self::InvalidRequest { description },
            "invalid_client" => Self::InvalidClient { description },
            "unauthorized_client" => Self::UnauthorizedClient { description },
            "unsupported_grant_type" => Self::UnsupportedGrantType { description },
            "invalid_scope" => Self::InvalidScope { description },
            other => Self::OAuth {
                error: other.chars().take(64).collect(),
                description,
            },
        }
    }
}

/// What the connect page is asked for besides the callback and challenge:
/// suggestions the admin may edit, and the partner's icon.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectRequest<'a> {
    /// The outpost name suggested.
    pub outpost_name: Option<&'a str>,
    /// URL of a PNG icon shown for the outpost.
    pub outpost_image: Option<&'a str>,
    /// The platform suggested.
    pub platform: Option<&'a Platform>,
}

/// The page to send the admin's browser to:
/// `{app_url}/outposts/connect?callback_url=..&code_challenge=..[&outpost_name=..][&outpost_image=..][&platform=..]`.
pub fn connect_url(
    app_url: &str,
    callback_url: &str,
    pkce: &Pkce,
    request: &ConnectRequest<'_>,
) -> Result<Url, ConnectError> {
    let mut url = Url::parse(&format!(
        "{}/outposts/connect",
        app_url.trim().trim_end_matches('/')
    ))
    .map_err(|e| FleetError::InvalidArgument(format!("bad app URL: {e}")))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("callback_url", callback_url);
        q.append_pair("code_challenge", &pkce.challenge);
        if let Some(name) = request.outpost_name {
            q.append_pair("outpost_name", name);
        }
        if let Some(image) = request.outpost_image {
            q.append_pair("outpost_image", image);
        }
        if let Some(platform) = request.platform {
            q.append_pair("platform", platform.as_str());
        }
    }
    Ok(url)
}

/// Reads the browser's return to the callback: the `code`, or the OAuth
/// `error` the connect page sent instead.
pub fn callback_code(callback: &Url) -> Result<String, ConnectError> {
    let get = |key: &str| {
        callback
            .query_pairs()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    };
    if let Some(error) = get("error") {
        let description = get("error_description").map(|d| snippet(d.as_bytes(), &[]));
        return Err(ConnectError::from_code(&error, description));
    }
    match get("code") {
        Some(code) if !code.is_empty() => Ok(code),
        _ => Err(FleetError::InvalidArgument("the callback has no code".into()).into()),
    }
}

/// Trades an authorization code for a connection token:
/// `POST {api_url}/outposts/connection-token`, form-encoded
/// `grant_type=authorization_code&code=..&code_verifier=..`. Not retried:
/// the code is single use.
pub async fn exchange_code(
    api_url: &str,
    code: &str,
    verifier: &Secret,
) -> Result<ConnectionToken, ConnectError> {
    let r = route::CONNECTION_TOKEN;
    let url = Url::parse(&format!(
        "{}/outposts/connection-token",
        api_url.trim().trim_end_matches('/')
    ))
    .map_err(|e| FleetError::InvalidArgument(format!("bad API URL: {e}")))?;
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(EXCHANGE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| FleetError::InvalidArgument(format!("cannot build HTTP client: {e}")))?;
    let resp = client
        .post(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("code_verifier", verifier.expose()),
        ])
        .send()
        .await
        .map_err(|e| http::transport(r, e, EXCHANGE_TIMEOUT))?;
    let status = resp.status();
    // Neither the code nor the verifier may surface in an error message.
    let code_secret = Secret::new(code);
    let scrub = [verifier, &code_secret];
    if status.is_success() {
        let body = http::read_capped(r, resp, EXCHANGE_MAX_BODY, EXCHANGE_TIMEOUT).await?;
        let token: ConnectionToken =
            serde_json::from_slice(&body).map_err(|e| FleetError::Decode {
                route: r,
                message: snippet(e.to_string().as_bytes(), &scrub),
            })?;
        return Ok(token);
    }
    let body = http::read_prefix(resp, EXCHANGE_MAX_BODY.min(64 * MAX_SNIPPET_CHARS)).await;
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body)
        && let Some(error) = value.get("error").and_then(|e| e.as_str())
    {
        let description = value
            .get("error_description")
            .and_then(|d| d.as_str())
            .map(|d| snippet(d.as_bytes(), &scrub));
        return Err(ConnectError::from_code(error, description));
    }
    Err(FleetError::Status {
        route: r,
        code: status.as_u16(),
        body: snippet(&body, &scrub),
        retry_after: None,
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7636_appendix_b_vector() {
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn generated_verifier_shape() {
        let a = Pkce::generate();
        let b = Pkce::generate();
        assert_eq!(a.verifier.expose().len(), VERIFIER_LEN);
        assert!(a.verifier.expose().bytes().all(|c| ALPHABET.contains(&c)));
        assert_ne!(a.verifier, b.verifier);
        assert_eq!(a.challenge, challenge(a.verifier.expose()));
        assert_eq!(a.challenge.len(), 43);
        assert!(!format!("{a:?}").contains(a.verifier.expose()));
    }

    #[test]
    fn connect_url_carries_the_challenge_not_the_verifier() {
        let p = Pkce::generate();
        let url = connect_url(
            "https://app.devin.ai/",
            "http://127.0.0.1:5000/cb?x=1",
            &p,
            &ConnectRequest {
                outpost_name: Some("my lab"),
                outpost_image: Some("https://partner.example.com/logo.png"),
                platform: Some(&Platform::Linux),
            },
        )
        .unwrap();
        assert_eq!(url.path(), "/outposts/connect");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert!(pairs.contains(&("callback_url".into(), "http://127.0.0.1:5000/cb?x=1".into())));
        assert!(pairs.contains(&("code_challenge".into(), p.challenge.clone())));
        assert!(pairs.contains(&("outpost_name".into(), "my lab".into())));
        assert!(pairs.contains(&("platform".into(), "linux".into())));
        assert!(pairs.contains(&(
            "outpost_image".into(),
            "https://partner.example.com/logo.png".into()
        )));
        assert!(!url.as_str().contains(p.verifier.expose()));
    }

    #[test]
    fn callback_code_reads_code_or_error() {
        let ok = Url::parse("http://127.0.0.1:1/cb?code=abc&state=s").unwrap();
        assert_eq!(callback_code(&ok).unwrap(), "abc");
        let denied = Url::parse("http://127.0.0.1:1/cb?error=access_denied").unwrap();
        assert!(matches!(
            callback_code(&denied),
            Err(ConnectError::OAuth { error, .. }) if error == "access_denied"
        ));
        let empty = Url::parse("http://127.0.0.1:1/cb").unwrap();
        assert!(matches!(callback_code(&empty), Err(ConnectError::Fleet(_))));
    }
}
