//! The shared core behind every HTTP module: the state under its mutex,
//! change notifications, the router, request counting, and the small
//! boundary helpers (errors, bearer tokens, query strings, JSON bodies).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::{broadcast, watch};

use crate::distribution::Distribution;
use crate::state::{AuthError, State, StateError, Stop, Timing};
use crate::{EmulatorConfig, Faults, now_ms};

/// Largest request body accepted anywhere.
pub(crate) const MAX_BODY: usize = 1024 * 1024;

/// How often the server's clock work (status lag, linger sweeper) runs.
const TICK: Duration = Duration::from_millis(25);

pub(crate) type SharedState = AxState<Arc<Shared>>;

/// Everything the request handlers share.
pub(crate) struct Shared {
    pub config: EmulatorConfig,
    pub base_url: String,
    pub gateway_url: String,
    pub account_token: String,
    pub state: Mutex<State>,
    pub faults: Mutex<Faults>,
    pub counts: Mutex<BTreeMap<String, u64>>,
    pub dist: Mutex<Distribution>,
    /// The event log head after each change; watchers re-read the log on
    /// any message (or lag), so nothing is lost to a full channel.
    pub events: broadcast::Sender<u64>,
    /// Bumped when a connected brain may have something new to do.
    pub kick: watch::Sender<u64>,
    pub shutdown: watch::Sender<bool>,
    pub fault_counter: AtomicU64,
    pub next_conn: AtomicU64,
}

/// Locks a mutex, ignoring poisoning: a panicked handler must not take the
/// whole emulator down with it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl Shared {
    pub fn new(config: EmulatorConfig, addr: SocketAddr, dist: Distribution) -> Self {
        let host = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        let base_url = format!("http://{host}");
        let gateway_url = format!("ws://{host}/gateway");
        let mut state = State::new(Timing {
            claim_ttl_ms: millis(config.claim_ttl),
            linger_ms: millis(config.linger),
            status_lag_ms: millis(config.status_lag),
            connect_token_ttl_ms: millis(config.connect_token_ttl),
            ..Timing::default()
        });
        for url in &config.connect_callbacks {
            state.allow_callback(url);
        }
        let account_token = state.mint_account_token(&[
            crate::state::SCOPE_MACHINE,
            crate::state::SCOPE_ORCHESTRATOR,
        ]);
        Self {
            faults: Mutex::new(config.faults.clone()),
            config,
            base_url,
            gateway_url,
            account_token,
            state: Mutex::new(state),
            counts: Mutex::default(),
            dist: Mutex::new(dist),
            events: broadcast::channel(1024).0,
            kick: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            fault_counter: AtomicU64::new(0),
            next_conn: AtomicU64::new(1),
        }
    }

    /// Runs one transition under the lock (never across an await) and
    /// wakes watchers and brains when it logged an event.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut State, i64) -> R) -> R {
        let (result, before, after) = {
            let mut state = lock(&self.state);
            let before = state.log.head();
            let result = f(&mut state, now_ms());
            (result, before, state.log.head())
        };
        if after != before {
            let _ = self.events.send(after);
            self.kick();
        }
        result
    }

    pub fn kick(&self) {
        self.kick.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub fn faults(&self) -> Faults {
        lock(&self.faults).clone()
    }

    pub fn stop(&self, session_id: &str, stop: Stop) -> Result<(), StateError> {
        self.with_state(|s, now| s.request_stop(session_id, stop, now))?;
        self.kick();
        Ok(())
    }

    /// Checks `Authorization: Bearer` for one of `scopes`.
    pub fn authorize(&self, headers: &HeaderMap, scopes: &[&str]) -> Result<(), ApiError> {
        let token = bearer(headers).ok_or_else(ApiError::unauthorized)?;
        let checked = lock(&self.state).check_account_token(token, scopes);
        checked.map_err(|e| match e {
            AuthError::Unauthorized => ApiError::unauthorized(),
            AuthError::Forbidden => ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("token lacks scope {}", scopes.join(" or ")),
            ),
        })
    }
}

/// Loads the configured (or located) simulator binary; without one the
/// distribution is empty and answers 404.
pub(crate) fn load_distribution(config: &EmulatorConfig) -> Distribution {
    match config.remote_binary.clone().or_else(crate::locate_remote_sim) {
        Some(path) => Distribution::load(&path).unwrap_or_else(|err| {
            tracing::warn!(path = %path.display(), %err, "remote binary unreadable; distribution disabled");
            Distribution::default()
        }),
        None => Distribution::default(),
    }
}

/// Resolves once the emulator is shutting down. (Awaiting `wait_for`
/// directly in a `select!` would keep a non-`Send` guard in the future.)
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Runs the server's clock work until the emulator shuts down.
pub(crate) async fn tick_loop(shared: Arc<Shared>) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        shared.with_state(|s, now| s.tick(now));
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .merge(crate::fleet_api::routes(shared.clone()))
        .merge(crate::connect::routes())
        .merge(crate::distribution::routes())
        .merge(crate::gateway::routes())
        .merge(crate::admin::routes())
        .route_layer(from_fn_with_state(shared.clone(), count_requests))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

/// Counts every routed request by method and route template.
async fn count_requests(AxState(shared): SharedState, req: Request, next: Next) -> Response {
    if let Some(path) = req.extensions().get::<MatchedPath>() {
        let key = format!("{} {}", req.method(), path.as_str());
        *lock(&shared.counts).entry(key).or_default() += 1;
    }
    next.run(req).await
}

/// A JSON error answer: `{"error": code, "message": ...}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn unauthorized() -> Self {
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
