//! What a handler answers: a response either way, and Tensorlake's error
//! body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Tensorlake's error body: `{"error": ..., "code": ...}`.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": message, "code": code })),
    )
        .into_response()
}

pub(crate) type Reply = Result<Response, Response>;
