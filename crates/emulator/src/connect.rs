//! The partner connection flow (PKCE): `/outposts/connect` approves at once
//! and redirects with a single-use code; `/outposts/connection-token`
//! exchanges code + verifier for an account token. Errors follow RFC 6749.

use std::sync::Arc;

use axum::Router;
use axum::extract::RawQuery;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use fleet::{ConnectionToken, Platform, Secret};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::server::{Shared, SharedState, query_params};
use crate::state::{GrantError, check_id};

pub(crate) const ACCOUNT_ID: &str = "account-emulator";
const SERVICE_USER_ID: &str = "service-user-emulator";
const DEFAULT_OUTPOST_NAME: &str = "outpost";

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/outposts/connect", get(approve))
        .route("/outposts/connection-token", post(exchange))
}

/// An RFC 6749 error answer.
fn oauth_error(code: &str, description: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(json!({"error": code, "error_description": description})),
    )
        .into_response()
}

/// RFC 7636: 43 to 128 characters of `[A-Za-z0-9-._~]`.
fn valid_verifier(v: &str) -> bool {
    (43..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

fn valid_challenge(c: &str) -> bool {
    c.len() == 43
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `base64url_nopad(sha256(verifier))`.
pub(crate) fn challenge_of(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

async fn approve(axum::extract::State(shared): SharedState, RawQuery(raw): RawQuery) -> Response {
    let params = query_params(raw.as_deref());
    let Some(callback) = params.get("callback_url") else {
        return oauth_error("invalid_request", "callback_url is required");
    };
    let callback = match url::Url::parse(callback) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        _ => return oauth_error("invalid_request", "callback_url must be an http(s) URL"),
    };
    let Some(challenge) = params.get("code_challenge").filter(|c| valid_challenge(c)) else {
        return oauth_error(
            "invalid_request",
            "code_challenge must be 43 base64url characters",
        );
    };
    let name = params
        .get("outpost_name")
        .filter(|n| !n.is_empty())
        .map_or(DEFAULT_OUTPOST_NAME, String::as_str);
    if check_id("outpost_name", name).is_err() {
        return oauth_error("invalid_request", "invalid outpost_name");
    }
    let platform = params
        .get("platform")
        .map(|p| Platform::from(p.as_str()))
        .unwrap_or_default();
    let code = shared.with_state(|s, now| {
        let outpost_id = match s.outpost_by_name(name) {
            Some(o) => o.id.clone(),
            None => s.create_outpost(name, platform, None, now),
        };
        s.mint_code(challenge, &outpost_id, now)
    });
    let mut location = callback;
    location.query_pairs_mut().append_pair("code", &code);
    if let Some(state) = params.get("state") {
        location.query_pairs_mut().append_pair("state", state);
    }
    let mut resp = StatusCode::FOUND.into_response();
    if let Ok(value) = HeaderValue::from_str(location.as_str()) {
        resp.headers_mut().insert(header::LOCATION, value);
    }
    resp
}

async fn exchange(axum::extract::State(shared): SharedState, body: Bytes) -> Response {
    let form = query_params(std::str::from_utf8(&body).ok());
    let Some(grant_type) = form.get("grant_type") else {
        return oauth_error("invalid_request", "grant_type is required");
    };
    if grant_type != "authorization_code" {
        return oauth_error(
            "unsupported_grant_type",
            "only authorization_code is supported",
        );
    }
    let (Some(code), Some(verifier)) = (form.get("code"), form.get("code_verifier")) else {
        return oauth_error("invalid_request", "code and code_verifier are required");
    };
    // A malformed verifier still uses the code up, like a wrong one.
    let challenge = if valid_verifier(verifier) {
        challenge_of(verifier)
    } else {
        String::new()
    };
    let redeemed = shared.with_state(|s, now| s.redeem_code(code, &challenge, now));
    let (outpost, token) = match redeemed {
        Ok(ok) => ok,
        Err(GrantError::InvalidGrant) => {
            return oauth_error(
                "invalid_grant",
                "code is invalid, used, expired, or does not match the verifier",
            );
        }
    };
    tracing::info!(outpost_id = %outpost.id, "connection token issued");
    let answer = ConnectionToken {
        outpost_id: outpost.id,
        account_id: ACCOUNT_ID.into(),
        outpost_name: outpost.name,
        service_user_id: SERVICE_USER_ID.into(),
        api_base_url: shared.base_url.clone(),
        access_token: Secret::new(token),
        token_type: "Bearer".into(),
    };
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::PRAGMA, "no-cache"),
        ],
        axum::Json(answer),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7636_example_challenge() {
        assert_eq!(
            challenge_of("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert!(valid_verifier(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        ));
        assert!(!valid_verifier("short"));
        assert!(valid_challenge(
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        ));
    }
}
