//! The admin API under `/_emulator/` (no auth, JSON): the in-process
//! operations of [`crate::Emulator`] for tests and demos in other processes.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use bytes::Bytes;
use fleet::Platform;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Faults;
use crate::http::{ApiError, parse_json};
use crate::lock::lock;
use crate::model::{NewSession, Script};
use crate::shared::{Shared, SharedState};
use crate::state::{Stop, check_id};

type AdminState = axum::extract::State<Arc<Shared>>;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/_emulator/info", get(info))
        .route("/_emulator/outposts", post(create_outpost))
        .route(
            "/_emulator/sessions",
            get(list_sessions).post(create_session),
        )
        .route("/_emulator/sessions/{id}", get(get_session))
        .route("/_emulator/sessions/{id}/suspend", post(suspend))
        .route("/_emulator/sessions/{id}/terminate", post(terminate))
        .route("/_emulator/sessions/{id}/resume", post(resume))
        .route("/_emulator/sessions/{id}/entry", delete(remove_entry))
        .route("/_emulator/faults", get(get_faults).put(put_faults))
        .route(
            "/_emulator/claim_ttl",
            get(get_claim_ttl).put(put_claim_ttl),
        )
        .route("/_emulator/tokens", post(mint_token))
        .route("/_emulator/requests", get(requests))
        .route("/_emulator/remote/corrupt", post(corrupt_remote))
        .route("/_emulator/cursors/expire", post(expire_cursors))
}

async fn info(axum::extract::State(shared): SharedState) -> Json<Value> {
    let remote_sha = lock(&shared.dist).latest();
    Json(json!({
        "base_url": shared.base_url,
        "static_base_url": format!("{}/static/devin-rs/remote/", shared.base_url),
        "gateway_url": shared.gateway_url,
        "remote_sha": remote_sha,
    }))
}

#[derive(Deserialize)]
struct OutpostBody {
    name: String,
    #[serde(default)]
    platform: Platform,
}

async fn create_outpost(AxState(shared): AdminState, body: Bytes) -> Result<Response, ApiError> {
    let body: OutpostBody = parse_json(&body)?;
    check_id("name", &body.name)?;
    let outpost = shared.with_state(|s, now| {
        let id = s.create_outpost(&body.name, body.platform, None, now);
        s.outpost(&id)
    });
    Ok((StatusCode::CREATED, Json(outpost)).into_response())
}

use axum::extract::State as AxState;

async fn create_session(AxState(shared): AdminState, body: Bytes) -> Result<Response, ApiError> {
    let req: NewSession = parse_json(&body)?;
    let session_id = shared.with_state(|s, now| s.create_session(req, now))?;
    Ok((StatusCode::CREATED, Json(json!({"session_id": session_id}))).into_response())
}

async fn list_sessions(AxState(shared): AdminState) -> Json<Value> {
    let views: Vec<_> =
        shared.with_state(|s, _| s.sessions.keys().filter_map(|id| s.view(id)).collect());
    Json(json!(views))
}

async fn get_session(
    AxState(shared): AdminState,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let view = shared
        .with_state(|s, _| s.view(&id))
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Json(json!(view)))
}

async fn suspend(
    AxState(shared): AdminState,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    shared.stop(&id, Stop::Sleep)?;
    Ok(Json(json!({})))
}

async fn terminate(
    AxState(shared): AdminState,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    shared.stop(&id, Stop::End)?;
    Ok(Json(json!({})))
}

async fn resume(
    AxState(shared): AdminState,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let script: Script = if body.is_empty() {
        Script::default()
    } else {
        parse_json(&body)?
    };
    shared.with_state(|s, now| s.resume(&id, script, now))?;
    shared.kick();
    Ok(Json(json!({})))
}

async fn remove_entry(
    AxState(shared): AdminState,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let removed = shared.with_state(|s, now| s.remove_entry(&id, now));
    if !removed {
        return Err(ApiError::not_found("entry"));
    }
    Ok(StatusCode::NO_CONTENT)
}

async fn get_faults(AxState(shared): AdminState) -> Json<Faults> {
    Json(shared.faults())
}

async fn put_faults(AxState(shared): AdminState, body: Bytes) -> Result<Json<Faults>, ApiError> {
    let faults: Faults = parse_json(&body)?;
    let rates = [
        faults.error_rate,
        faults.lost_answer_rate,
        faults.transient_suspended_rate,
        faults.duplicate_event_rate,
        faults.claim_deadline_missing_rate,
    ];
    if rates.iter().any(|r| !(0.0..=1.0).contains(r)) {
        return Err(ApiError::bad_request("rates must be within 0..=1"));
    }
    *lock(&shared.faults) = faults.clone();
    Ok(Json(faults))
}

#[derive(Deserialize)]
struct TokenBody {
    #[serde(default)]
    scopes: Vec<String>,
}

async fn mint_token(AxState(shared): AdminState, body: Bytes) -> Result<Json<Value>, ApiError> {
    let body: TokenBody = parse_json(&body)?;
    if body.scopes.len() > 16 || body.scopes.iter().any(|s| s.len() > 128) {
        return Err(ApiError::bad_request("too many or too long scopes"));
    }
    let scopes: Vec<&str> = body.scopes.iter().map(String::as_str).collect();
    let token = shared.with_state(|s, _| s.mint_account_token(&scopes));
    Ok(Json(json!({"token": token})))
}

async fn requests(AxState(shared): AdminState) -> Json<Value> {
    Json(json!(lock(&shared.counts).clone()))
}

async fn corrupt_remote(AxState(shared): AdminState) -> Json<Value> {
    let sha = lock(&shared.dist).add_corrupt();
    Json(json!({"sha": sha}))
}

/// Every cursor handed out so far answers 410 from now on.
async fn expire_cursors(AxState(shared): AdminState) -> StatusCode {
    shared.with_state(|s, _| s.expire_cursors());
    StatusCode::NO_CONTENT
}

/// `{"ms": N}`: the lifetime of claims granted from now on.
#[derive(serde::Serialize, Deserialize)]
struct ClaimTtl {
    ms: u64,
}

async fn get_claim_ttl(AxState(shared): AdminState) -> Json<ClaimTtl> {
    let ms = shared.with_state(|s, _| s.timing.claim_ttl_ms);
    Json(ClaimTtl {
        ms: ms.max(0) as u64,
    })
}

async fn put_claim_ttl(
    AxState(shared): AdminState,
    body: Bytes,
) -> Result<Json<ClaimTtl>, ApiError> {
    let ttl: ClaimTtl = parse_json(&body)?;
    if ttl.ms == 0 || ttl.ms > 24 * 3600 * 1000 {
        return Err(ApiError::bad_request("ms must be within 1..=86400000"));
    }
    shared.with_state(|s, _| s.timing.claim_ttl_ms = ttl.ms as i64);
    Ok(Json(ttl))
}
