//! The fleet API under `/opbeta/outposts`: the queue ("devins") and outpost
//! CRUD, in both spellings deployed clients use. Handlers validate input,
//! run one state transition, and render the answer.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, extract::State as AxState};
use bytes::Bytes;
use fleet::{AcceptorBody, Platform};
use serde_json::{Value, json};

use crate::faults;
use crate::http::{ApiError, parse_first, parse_json, query_params};
use crate::render::{entry_json, outpost_json};
use crate::shared::{Shared, SharedState};
use crate::state::{ListQuery, SCOPE_MACHINE, SCOPE_ORCHESTRATOR, Stamp, check_id};

const MAX_PAGE: usize = 200;
const DEFAULT_PAGE: usize = 100;
const MAX_DESCRIPTION: usize = 4096;

pub(crate) fn routes(shared: Arc<Shared>) -> Router<Arc<Shared>> {
    Router::new()
        .route("/opbeta/outposts/devins", get(list_or_watch))
        .route("/opbeta/outposts/devins/{id}", get(get_entry))
        .route("/opbeta/outposts/devins/{id}/claim", post(claim))
        .route("/opbeta/outposts/devins/{id}/release", post(release))
        .route(
            "/opbeta/outposts/outposts",
            get(list_outposts).post(create_outpost),
        )
        .route(
            "/opbeta/outposts/outposts/{id}",
            get(get_outpost).delete(delete_outpost),
        )
        .route("/opbeta/outposts", get(list_outposts).post(create_outpost))
        .route(
            "/opbeta/outposts/{id}",
            get(get_outpost).delete(delete_outpost),
        )
        .route_layer(from_fn_with_state(shared, faults::middleware))
}

fn session_id(id: &str) -> Result<(), ApiError> {
    fleet::validate_session_id(id).map_err(|e| ApiError::bad_request(e.to_string()))
}

async fn list_or_watch(
    AxState(shared): SharedState,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    shared.authorize(&headers, &[SCOPE_MACHINE])?;
    let params = query_params(raw.as_deref());
    // Devin's reference, "List queued sessions": `outpost` is a filter
    // ("Filter by outpost ID. Applies to both list and watch"), so without
    // it the account's entries are listed, and an unknown outpost simply
    // matches nothing (as in Cognition's own mock server).
    let outpost_id = match params.get("outpost").filter(|o| !o.is_empty()) {
        None => None,
        Some(o) => {
            check_id("outpost", o)?;
            Some(o.clone())
        }
    };
    if params.get("watch").is_some_and(|w| w == "true" || w == "1") {
        return crate::watch::stream(shared, outpost_id, params.get("cursor").map(String::as_str));
    }
    let first = parse_first(&params, DEFAULT_PAGE, MAX_PAGE)?;
    let cursor = match params.get("cursor").filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => {
            Some(Stamp::parse_cursor(c).ok_or_else(|| ApiError::bad_request("invalid cursor"))?)
        }
    };
    let optional = |name: &str| -> Result<Option<String>, ApiError> {
        match params.get(name).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => {
                check_id(name, v)?;
                Ok(Some(v.clone()))
            }
        }
    };
    let query = ListQuery {
        outpost_id,
        phase: optional("phase")?,
        acceptor_id: optional("acceptor_id")?,
        first,
        cursor,
    };
    let page = shared.with_state(|s, now| {
        s.expire_claims(now);
        s.list(&query)
    })?;
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|e| entry_json(&shared, e, true))
        .collect();
    Ok(Json(json!({
        "items": items,
        "cursor": page.cursor,
        "has_next_page": page.has_next_page,
        "total": page.total,
    }))
    .into_response())
}

async fn get_entry(
    AxState(shared): SharedState,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    shared.authorize(&headers, &[SCOPE_MACHINE])?;
    session_id(&id)?;
    let entry = shared
        .with_state(|s, now| {
            s.expire_claims(now);
            s.render(&id)
        })
        .ok_or_else(|| ApiError::not_found("entry"))?;
    Ok(Json(entry_json(&shared, &entry, true)))
}

async fn claim(
    AxState(shared): SharedState,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    shared.authorize(&headers, &[SCOPE_MACHINE])?;
    session_id(&id)?;
    let AcceptorBody { acceptor_id } = parse_json(&body)?;
    let (mut entry, _token) = shared.with_state(|s, now| {
        s.expire_claims(now);
        s.claim(&id, &acceptor_id, now)
    })?;
    tracing::info!(session_id = %id, %acceptor_id, "claimed");
    entry.status.gateway_url = Some(shared.gateway_url.clone());
    let mut answer = entry_json(&shared, &entry, false);
    if faults::roll(shared.faults().claim_deadline_missing_rate)
        && let Some(status) = answer["status"].as_object_mut()
    {
        status.remove("claim_deadline");
    }
    Ok(Json(answer))
}

async fn release(
    AxState(shared): SharedState,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    shared.authorize(&headers, &[SCOPE_MACHINE])?;
    session_id(&id)?;
    let AcceptorBody { acceptor_id } = parse_json(&body)?;
    let tell_watchers = !shared.faults().silent_release;
    let entry = shared.with_state(|s, now| {
        s.expire_claims(now);
        s.release_telling(&id, &acceptor_id, now, tell_watchers)
    })?;
    tracing::info!(session_id = %id, %acceptor_id, "released");
    Ok(Json(entry_json(&shared, &entry, false)))
}

async fn list_outposts(
    AxState(shared): SharedState,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    // The reference names the orchestrator scope for create, get and
    // delete only; `devin worker start` lists the account's outposts to
    // prompt for one, so listing takes the machine scope too.
    shared.authorize(&headers, &[SCOPE_MACHINE])?;
    let params = query_params(raw.as_deref());
    let first = parse_first(&params, DEFAULT_PAGE, MAX_PAGE)?;
    let after = params.get("after").filter(|a| !a.is_empty());
    let (items, end_cursor, has_next_page) = shared.with_state(|s, now| {
        // An expired claim is not an active one (lazy expiry, as on reads).
        s.expire_claims(now);
        s.list_outposts(first, after.map(String::as_str))
    })?;
    let items: Vec<Value> = items.iter().map(|o| outpost_json(&shared, o)).collect();
    Ok(Json(json!({
        "items": items,
        "end_cursor": end_cursor,
        "has_next_page": has_next_page,
    })))
}

async fn create_outpost(
    AxState(shared): SharedState,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    shared.authorize(&headers, &[SCOPE_ORCHESTRATOR])?;
    let body: Value = parse_json(&body)?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("name is required"))?;
    check_id("name", name)?;
    let platform = body
        .get("platform")
        .and_then(Value::as_str)
        .map(Platform::from)
        .unwrap_or_default();
    let description = body
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if description
        .as_ref()
        .is_some_and(|d| d.len() > MAX_DESCRIPTION)
    {
        return Err(ApiError::bad_request("description too long"));
    }
    let outpost = shared.with_state(|s, now| {
        let id = s.create_outpost(name, platform, description, now);
        s.outpost(&id)
    });
    let body = outpost.map(|o| outpost_json(&shared, &o));
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

async fn get_outpost(
    AxState(shared): SharedState,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // Devin's reference, "Outposts": "Create, get, and delete require the
    // orchestrator scope".
    shared.authorize(&headers, &[SCOPE_ORCHESTRATOR])?;
    check_id("outpost", &id)?;
    let outpost = shared.with_state(|s, now| {
        s.expire_claims(now);
        s.outpost(&id)
    });
    outpost
        .map(|o| Json(outpost_json(&shared, &o)))
        .ok_or_else(|| ApiError::not_found("outpost"))
}

async fn delete_outpost(
    AxState(shared): SharedState,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    shared.authorize(&headers, &[SCOPE_ORCHESTRATOR])?;
    check_id("outpost", &id)?;
    shared.with_state(|s, now| s.delete_outpost(&id, now))?;
    Ok(StatusCode::NO_CONTENT)
}
