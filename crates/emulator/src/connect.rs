//! The partner connection flow, as Devin's "Outposts partner
//! integrations" page describes it: `GET /outposts/connect` shows the
//! confirmation (editable name and platform), `POST /outposts/connect` is
//! the admin's Connect click, which checks the callback allowlist and that
//! the name is free and redirects with a single-use code;
//! `POST /outposts/connection-token` exchanges code + verifier, creating
//! the outpost and a machine-scoped service user only then. Token errors
//! follow RFC 6749 §5.2.

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

use crate::connect_page::{self, ConnectForm};
use crate::http::query_params;
use crate::shared::{Shared, SharedState};
use crate::state::{ACCOUNT_ID, Approval, ApproveError, GrantError, check_id};
const DEFAULT_OUTPOST_NAME: &str = "outpost";

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/outposts/connect", get(show).post(confirm))
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

/// Reads and checks what the partner sent (from the query or the form).
/// The callback is checked first: when it is unusable or not allowlisted
/// the browser must not be sent there (RFC 6749 §4.1.2.1), so the page
/// only explains.
fn read_form(
    shared: &Shared,
    params: &std::collections::HashMap<String, String>,
) -> Result<ConnectForm, Box<Response>> {
    let refuse = |m: &str| Err(Box::new(connect_page::refusal(StatusCode::BAD_REQUEST, m)));
    let Some(callback) = params.get("callback_url").filter(|c| !c.is_empty()) else {
        return refuse("callback_url is required.");
    };
    if !url::Url::parse(callback).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
        return refuse("callback_url must be an http(s) URL.");
    }
    if !shared.with_state(|s, _| s.callback_allowed(callback)) {
        return refuse(&not_allowed(callback));
    }
    let Some(challenge) = params.get("code_challenge").filter(|c| valid_challenge(c)) else {
        return refuse("code_challenge must be 43 base64url characters (PKCE S256).");
    };
    Ok(ConnectForm {
        callback_url: callback.clone(),
        code_challenge: challenge.clone(),
        outpost_name: params
            .get("outpost_name")
            .map_or(DEFAULT_OUTPOST_NAME, String::as_str)
            .trim()
            .to_owned(),
        outpost_image: params
            .get("outpost_image")
            .filter(|i| !i.is_empty())
            .cloned(),
        platform: params
            .get("platform")
            .filter(|p| !p.is_empty())
            .map_or("linux", String::as_str)
            .to_owned(),
        state: params.get("state").cloned(),
    })
}

fn not_allowed(callback: &str) -> String {
    format!(
        "callback_url {callback} is not on this integration's allowlist, so no code \
         can be sent there. Cognition must add the exact URL (on the emulator: \
         garrison emulate --allow-callback URL)."
    )
}

/// The connect page: a confirmation with the suggested name and platform,
/// both editable.
async fn show(axum::extract::State(shared): SharedState, RawQuery(raw): RawQuery) -> Response {
    let params = query_params(raw.as_deref());
    match read_form(&shared, &params) {
        Ok(form) => connect_page::confirm(StatusCode::OK, &form, None),
        Err(page) => *page,
    }
}

/// The admin's Connect (or Cancel) click.
async fn confirm(axum::extract::State(shared): SharedState, body: Bytes) -> Response {
    let params = query_params(std::str::from_utf8(&body).ok());
    let form = match read_form(&shared, &params) {
        Ok(form) => form,
        Err(page) => return *page,
    };
    if params.get("action").is_some_and(|a| a == "cancel") {
        return redirect(
            &form,
            &[
                ("error", "access_denied"),
                ("error_description", "The admin cancelled the connection"),
            ],
        );
    }
    let again = |status, message: &str| connect_page::confirm(status, &form, Some(message));
    if form.outpost_name.is_empty() || check_id("outpost_name", &form.outpost_name).is_err() {
        return again(StatusCode::BAD_REQUEST, "Enter an outpost name.");
    }
    let platform = match form.platform.as_str() {
        "linux" | "macos" | "windows" => Platform::from(form.platform.as_str()),
        _ => {
            return again(
                StatusCode::BAD_REQUEST,
                "The platform must be linux, macos or windows.",
            );
        }
    };
    let approval = Approval {
        callback_url: form.callback_url.clone(),
        challenge: form.code_challenge.clone(),
        outpost_name: form.outpost_name.clone(),
        platform,
    };
    match shared.with_state(|s, now| s.approve_connection(&approval, now)) {
        Ok(code) => redirect(&form, &[("code", &code)]),
        Err(ApproveError::NameTaken) => again(
            StatusCode::CONFLICT,
            &format!(
                "The outpost name \"{}\" is already taken. Choose another name; to \
                 serve the existing outpost, use a token for it instead \
                 (garrison connect --manual).",
                form.outpost_name
            ),
        ),
        Err(ApproveError::CallbackNotAllowed) => {
            connect_page::refusal(StatusCode::BAD_REQUEST, &not_allowed(&form.callback_url))
        }
    }
}

/// `302` to the callback with `pairs` (and the partner's `state`) added.
fn redirect(form: &ConnectForm, pairs: &[(&str, &str)]) -> Response {
    let Ok(mut location) = url::Url::parse(&form.callback_url) else {
        return connect_page::refusal(StatusCode::BAD_REQUEST, "callback_url is not a URL.");
    };
    {
        let mut q = location.query_pairs_mut();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
        if let Some(state) = &form.state {
            q.append_pair("state", state);
        }
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
    let redeemed = match redeemed {
        Ok(ok) => ok,
        // The partners page's own wording for an unknown, expired, replayed
        // or PKCE-mismatched code.
        Err(GrantError::InvalidGrant) => {
            return oauth_error("invalid_grant", "Invalid or expired connection code");
        }
        Err(GrantError::NameTaken) => {
            return oauth_error(
                "invalid_grant",
                "The outpost name was taken before the code was redeemed",
            );
        }
    };
    let outpost = redeemed.outpost;
    tracing::info!(outpost_id = %outpost.id, "connection token issued");
    let answer = ConnectionToken {
        outpost_id: outpost.id,
        account_id: ACCOUNT_ID.into(),
        outpost_name: outpost.name,
        service_user_id: redeemed.service_user_id,
        api_base_url: shared.base_url.clone(),
        access_token: Secret::new(redeemed.token),
        token_type: "bearer".into(),
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
