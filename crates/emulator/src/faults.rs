//! Fault injection for the fleet API: latency, 500/503 answers (before any
//! state change, so a retry is always safe), lost answers (502 after the
//! change was made), and the dice the stream and read paths use for their
//! own faults.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::http::ApiError;
use crate::shared::SharedState;

/// True with probability `rate`.
pub(crate) fn roll(rate: f64) -> bool {
    rate > 0.0 && rand::random::<f64>() < rate
}

pub(crate) async fn middleware(
    axum::extract::State(shared): SharedState,
    req: Request,
    next: Next,
) -> Response {
    let faults = shared.faults();
    if faults.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
    }
    if roll(faults.error_rate) {
        let n = shared.fault_counter.fetch_add(1, Ordering::Relaxed);
        let status = if n % 2 == 0 {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        return ApiError::new(status, "server_error", "injected fault").into_response();
    }
    let answer = next.run(req).await;
    // A watch's answer is its stream: losing it is `cut_watch_every_secs`.
    if roll(faults.lost_answer_rate) && !is_stream(&answer) {
        return ApiError::new(
            StatusCode::BAD_GATEWAY,
            "bad_gateway",
            "injected lost answer",
        )
        .into_response();
    }
    answer
}

fn is_stream(answer: &Response) -> bool {
    answer
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}
