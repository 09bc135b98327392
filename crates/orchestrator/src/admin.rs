//! The admin HTTP listener of `garrison serve`: `/metrics`, `/healthz`,
//! `/readyz`, the JSON API of [`crate::api`] and the dashboard at `/`.
//!
//! It listens on loopback by default. Changing anything (terminating a
//! session) needs the admin token of [`token`] (`Authorization: Bearer`);
//! on a non-loopback address, accepted with a warning, so does reading
//! anything but `/healthz` and the dashboard's static files. While bound to
//! loopback, requests naming any other host are refused (so a web page
//! cannot reach the listener by DNS rebinding), and `POST` routes require a
//! JSON body (so a cross-site form or `no-cors` fetch cannot trigger them).

pub(crate) mod listing;
pub(crate) mod prometheus;
mod routes;
mod state;
pub(crate) mod token;

pub(crate) use state::AdminState;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use common::Secret;

const INDEX_HTML: &str = include_str!("admin/assets/index.html");
const APP_JS: &str = include_str!("admin/assets/app.js");
const STYLE_CSS: &str = include_str!("admin/assets/style.css");

/// A running admin listener; stops when dropped.
pub(crate) struct AdminServer {
    task: JoinHandle<()>,
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Binds `addr` and serves the admin routes in the background.
pub(crate) async fn start(addr: SocketAddr, state: AdminState) -> anyhow::Result<AdminServer> {
    let loopback = addr.ip().is_loopback();
    if !loopback {
        warn!(
            %addr,
            "the admin listener is not on loopback: every request but /healthz and the dashboard's files needs the admin token, sent in cleartext (put TLS in front of it)"
        );
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("{}", bind_failure(addr, &e)))?;
    let addr = listener.local_addr()?;
    info!("admin listening on http://{addr}");
    let app = router(Arc::new(state), loopback);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            warn!(error = %e, "the admin listener stopped");
        }
    });
    Ok(AdminServer { task })
}

/// Why the admin listener could not bind, naming the flag that sets its
/// address and what to do.
fn bind_failure(addr: SocketAddr, e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    let why = match e.kind() {
        ErrorKind::AddrInUse => format!(
            "the address is in use: another process (another garrison serve?) listens on {addr}; \
             stop it, or give this one another address with --listen (e.g. --listen 127.0.0.1:{})",
            addr.port().wrapping_add(1)
        ),
        ErrorKind::PermissionDenied => "permission denied: ports below 1024 need root or \
            CAP_NET_BIND_SERVICE; choose another port with --listen"
            .to_owned(),
        ErrorKind::AddrNotAvailable => format!(
            "{} is not an address of this machine; choose another with --listen",
            addr.ip()
        ),
        _ => format!("{e}; choose another address with --listen"),
    };
    format!("cannot start the admin listener on {addr} (--listen): {why}")
}

/// The admin routes; `loopback_only` refuses other peers.
pub(crate) fn router(state: Arc<AdminState>, loopback_only: bool) -> Router {
    let token = state.token.clone();
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_route))
        .route("/", get(index))
        .route("/sessions/{id}", get(index))
        .route("/assets/app.js", get(app_js))
        .route("/assets/style.css", get(style_css))
        .merge(routes::routes())
        .with_state(state)
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let token = token.clone();
            async move { require_token(req, next, &token, loopback_only).await }
        }))
        .layer(middleware::from_fn(security_headers));
    if loopback_only {
        router.layer(middleware::from_fn(loopback_host_only))
    } else {
        router
    }
}

/// Whether a `Host` header names this machine: an IP literal or localhost.
fn local_host_header(host: &str) -> bool {
    let digits = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    if let Some(rest) = host.strip_prefix('[') {
        // [v6] or [v6]:port
        return rest.split_once(']').is_some_and(|(ip, port)| {
            ip.parse::<std::net::Ipv6Addr>().is_ok()
                && (port.is_empty() || port.strip_prefix(':').is_some_and(digits))
        });
    }
    let name = host
        .rsplit_once(':')
        .filter(|(_, port)| digits(port))
        .map_or(host, |(name, _)| name)
        .to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

async fn loopback_host_only(req: Request, next: Next) -> Response {
    let ok = match req.headers().get(header::HOST) {
        None => true,
        Some(v) => v.to_str().is_ok_and(local_host_header),
    };
    if ok {
        next.run(req).await
    } else {
        (
            StatusCode::MISDIRECTED_REQUEST,
            axum::Json(
                json!({ "error": "the admin listener only answers requests for localhost" }),
            ),
        )
            .into_response()
    }
}

async fn require_token(req: Request, next: Next, token: &Secret, loopback: bool) -> Response {
    if !token::needs_token(req.method(), req.uri().path(), loopback) {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if token::presents(header, token) {
        return next.run(req).await;
    }
    let mut res = (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({
            "error": format!(
                "this needs the admin token (<state-dir>/{}, or {} for the CLI)",
                token::ADMIN_TOKEN_FILE,
                token::ADMIN_TOKEN_ENV
            )
        })),
    )
        .into_response();
    res.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"garrison\""),
    );
    res
}

async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    res
}

async fn healthz() -> impl IntoResponse {
    axum::Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<Arc<AdminState>>) -> Response {
    match state.readiness(chrono::Utc::now().timestamp_millis()) {
        Ok(()) => axum::Json(json!({ "ready": true })).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({ "ready": false, "reason": reason })),
        )
            .into_response(),
    }
}

async fn metrics_route(State(state): State<Arc<AdminState>>) -> Response {
    let serving = &state.serving;
    let sessions_by_stage = serving
        .store
        .count_by_stage()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let outposts = serving
        .views
        .iter()
        .zip(&state.outposts)
        .map(|(v, o)| prometheus::OutpostScrape {
            outpost_id: v.outpost_id().to_owned(),
            watch_reconnects: v
                .watch_reconnects
                .load(std::sync::atomic::Ordering::Relaxed),
            relists: v.relists.load(std::sync::atomic::Ordering::Relaxed),
            synced_at_ms: v.synced_at(),
            pending: routes::pending(v, o),
        })
        .collect();
    let body = prometheus::render(&prometheus::Scrape {
        metrics: &serving.metrics,
        sessions_by_stage,
        fleet: serving.client.stats(),
        outposts,
        ready: state
            .readiness(chrono::Utc::now().timestamp_millis())
            .is_ok(),
        version: state.version,
        started_at_ms: state.started_at_ms,
        store_writes: serving.store.writes(),
    });
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
}

async fn app_js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        APP_JS,
    )
}

async fn style_css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STYLE_CSS,
    )
}

#[cfg(test)]
mod tests;
