//! The small boundary helpers every HTTP module shares: the JSON error
//! answer, bearer tokens, query strings, JSON bodies and page sizes.

use std::collections::HashMap;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::state::StateError;

/// Largest request body accepted anywhere.
pub(crate) const MAX_BODY: usize = 1024 * 1024;

/// A JSON error answer: `{"error": code, "message": ...}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub(crate) fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or unknown bearer token",
        )
    }
}

impl From<StateError> for ApiError {
    fn from(e: StateError) -> Self {
        let message = e.to_string();
        match e {
            StateError::NotFound(_) => Self::new(StatusCode::NOT_FOUND, "not_found", message),
            StateError::Conflict(_) => Self::new(StatusCode::CONFLICT, "conflict", message),
            StateError::Invalid(_) => Self::bad_request(message),
            StateError::Gone => Self::new(StatusCode::GONE, "expired_cursor", message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (
            self.status,
            axum::Json(json!({"error": self.code, "message": self.message})),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Decodes a query string; the last of repeated keys wins.
pub(crate) fn query_params(raw: Option<&str>) -> HashMap<String, String> {
    url::form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// Parses a JSON body regardless of its content type (clients differ).
pub(crate) fn parse_json<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Parses `first`: absent means `default`, outside `1..=max` is refused.
pub(crate) fn parse_first(
    params: &HashMap<String, String>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    match params.get("first") {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| ApiError::bad_request(format!("first must be 1..={max}"))),
    }
}
