//! A mock of Tensorlake's sandbox API for tests, following what the
//! official SDK (`tensorlake` 0.5.163 on PyPI, its Rust core in the
//! `tensorlake` crate, <https://github.com/tensorlakeai/tensorlake>) sends
//! and expects; `tests/python/test_tensorlake_sdk.py` drives it with that
//! SDK:
//!
//! - lifecycle (the SDK's sandbox API host: point `TENSORLAKE_SANDBOX_API_URL`
//!   here): `POST/GET /sandboxes`, `GET/PATCH/DELETE /sandboxes/{id}` (a
//!   name works wherever an id does), `POST /sandboxes/{id}/{suspend,
//!   resume,snapshot}`, `GET/DELETE /snapshots/{id}`, `GET /snapshots`;
//!   states `pending -> running -> suspending -> suspended -> running`;
//!   a create waits for the sandbox to run (200) unless it sent
//!   `"wait": false` (202, `pending`); missing sizes get the service's
//!   defaults; `GET /sandboxes` pages by 100 with a `cursor`; suspend and
//!   resume answer 200 once done within `wait_ms`, else 202; a delete is
//!   asynchronous (`terminated`, gone after the transition); snapshots go
//!   `in_progress -> local_ready -> completed` and restore from
//!   `local_ready`; 409 on a reused name and on a suspend or resume
//!   mid-transition; idle named sandboxes suspended after `timeout_secs`
//!   when [`MockConfig::idle_suspend`] is on;
//! - data plane, on the same address, the sandbox named by the
//!   `X-Tensorlake-Sandbox-Id` header or a `Host: {id}.local` (the SDK's
//!   form on loopback): `/api/v1/processes` (start, list, get, signal,
//!   output, stdout, stderr, their follows as server-sent events, and the
//!   streaming `run`), `/api/v1/files` (read, write, delete, `list`),
//!   `/api/v1/pty` with its binary websocket (token in `X-PTY-Token`, or
//!   `?token=` as the service's fallback);
//! - the sandbox-image catalog the SDK's image builder and lookups use
//!   (`/images/v4/images...`, `/platform/v1/sandbox-templates`; see
//!   `catalog`): a sandbox created with `image` naming a registered image
//!   starts from its snapshot's filesystem;
//! - the service's failure answers on demand: [`Fault`] and
//!   [`CreateOutcome`], from Rust or through `POST /_mock/faults` and
//!   `POST /_mock/create_outcomes`;
//! - bearer authentication on everything (401).
//!
//! Processes really run, on the host, in a directory per sandbox
//! (`<root>/sandboxes/<id>`): paths given to the files and process APIs
//! are host paths that must lie inside it. Suspending a sandbox stops its
//! processes (`SIGSTOP`) and resuming continues them, so memory is kept.
//! Snapshots are tar archives of the directory.
//!
//! Where the published material is silent the mock chooses, and says so:
//! a data-plane request to a sandbox that is not running answers 409
//! `SANDBOX_NOT_RUNNING` (unless it was created with `auto_resume`), a
//! resume is immediate, and named processes are never restarted.

// Handlers fail with the response to send, as axum handlers do; boxing
// every error response would buy nothing in a test mock.
#![allow(clippy::result_large_err)]

mod catalog;
mod config;
mod control;
mod create;
mod dataplane;
mod files;
mod group;
mod host;
mod lifecycle;
mod pty;
mod reply;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use tokio::task::JoinHandle;

pub use config::{CreateOutcome, Fault, MockConfig};
use reply::error;
use state::Shared;

/// A running mock. Dropping it stops the server and kills every process
/// it started.
pub struct MockTensorlake {
    url: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
    ticker: JoinHandle<()>,
}

impl MockTensorlake {
    /// Serves on `127.0.0.1` at a free port.
    pub async fn start(config: MockConfig) -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1:0".parse()?, config).await
    }

    /// Serves on `addr` (port 0 picks a free one).
    pub async fn start_on(addr: SocketAddr, config: MockConfig) -> anyhow::Result<Self> {
        for dir in ["sandboxes", "snapshots", "images"] {
            std::fs::create_dir_all(config.root.join(dir))?;
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let shared = Arc::new(Shared::new(config, url.clone()));
        let app = router(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let ticker = tokio::spawn(lifecycle::idle_ticker(shared.clone()));
        Ok(Self {
            url,
            addr,
            shared,
            server,
            ticker,
        })
    }

    /// The API's base URL (lifecycle and data plane).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address served on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The template of Garrison's sandbox root for this mock: every
    /// sandbox's host directory, `{id}` standing for its id.
    pub fn sandbox_root_template(&self) -> String {
        format!(
            "{}/{{id}}",
            self.shared.config.root.join("sandboxes").display()
        )
    }

    /// Makes the next matching requests fail.
    pub fn inject(&self, fault: Fault) {
        self.shared.faults.lock().expect("faults").push(fault);
    }

    /// Makes the next create answer `outcome` (queued after earlier ones).
    pub fn next_create(&self, outcome: CreateOutcome) {
        self.shared
            .create_outcomes
            .lock()
            .expect("create outcomes")
            .push_back(outcome);
    }

    /// How many requests (after authentication) had a path starting with
    /// `prefix`.
    pub fn requests(&self, prefix: &str) -> usize {
        self.shared
            .log
            .lock()
            .expect("log")
            .iter()
            .filter(|(_, p)| p.starts_with(prefix))
            .count()
    }

    /// How many `method` requests were for exactly `path`.
    pub fn requests_exact(&self, method: &str, path: &str) -> usize {
        self.shared
            .log
            .lock()
            .expect("log")
            .iter()
            .filter(|(m, p)| m.eq_ignore_ascii_case(method) && p == path)
            .count()
    }

    /// The body of the last `POST /sandboxes`, as sent.
    pub fn last_create(&self) -> Option<serde_json::Value> {
        self.shared.last_create.lock().expect("last create").clone()
    }

    /// The body of every process start so far (`POST /api/v1/processes`),
    /// as sent: for checking what a client put in argv and environment.
    pub fn process_starts(&self) -> Vec<serde_json::Value> {
        self.shared
            .process_starts
            .lock()
            .expect("process starts")
            .clone()
    }

    /// How each PTY websocket attach carried its token so far: `"header"`
    /// (`X-PTY-Token`) or `"query"` (`?token=`).
    pub fn pty_token_carriers(&self) -> Vec<&'static str> {
        self.shared
            .pty_token_carriers
            .lock()
            .expect("pty token carriers")
            .clone()
    }

    /// The `X-Tensorlake-Request-Timeout-Grace-Ms` of every create so far
    /// (`None` where it was not sent).
    pub fn create_graces(&self) -> Vec<Option<u64>> {
        self.shared.create_graces.lock().expect("graces").clone()
    }

    /// The `wait_ms` of every suspend and resume so far that was not
    /// refused (`None` where it was not sent).
    pub fn lifecycle_waits(&self) -> Vec<Option<u64>> {
        self.shared
            .lifecycle_waits
            .lock()
            .expect("lifecycle waits")
            .clone()
    }

    /// A snapshot's state (`in_progress`, `local_ready`, `completed`).
    pub fn snapshot_status(&self, snapshot_id: &str) -> Option<String> {
        self.shared
            .lock()
            .snapshots
            .get(snapshot_id)
            .map(|s| s.status.as_str().to_owned())
    }

    /// Suspends a sandbox as Tensorlake does after an idle window.
    pub fn suspend_for_idleness(&self, sandbox_id: &str) -> bool {
        lifecycle::begin_suspend(&self.shared, sandbox_id).is_ok()
    }

    /// A sandbox's network rules as last set (create or update); `None`
    /// for open egress or an unknown sandbox.
    pub fn network(&self, sandbox_id: &str) -> Option<serde_json::Value> {
        self.shared.network_of(sandbox_id)
    }

    /// A sandbox's state, `None` once deleted.
    pub fn status(&self, sandbox_id: &str) -> Option<String> {
        self.shared.status_of(sandbox_id)
    }
}

impl Drop for MockTensorlake {
    fn drop(&mut self) {
        self.server.abort();
        self.ticker.abort();
        self.shared.kill_everything();
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .merge(lifecycle::routes())
        .merge(dataplane::routes())
        .merge(files::routes())
        .merge(pty::routes())
        .merge(catalog::routes())
        .merge(control::routes())
        .layer(axum::middleware::from_fn_with_state(shared.clone(), gate))
        .with_state(shared)
}

/// Authentication, the request log and injected faults.
async fn gate(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let expected = format!("Bearer {}", shared.config.api_key);
    let authorized = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == expected);
    if !authorized {
        return error(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "invalid API key");
    }
    let path = request.uri().path().to_owned();
    let method = request.method().as_str().to_owned();
    {
        let mut log = shared.log.lock().expect("log");
        if log.len() >= MAX_LOG {
            log.drain(..MAX_LOG / 2);
        }
        log.push((method.clone(), path.clone()));
    }
    let fault = {
        let mut faults = shared.faults.lock().expect("faults");
        let hit = faults.iter_mut().find(|f| {
            f.times > 0
                && path.starts_with(&f.path_prefix)
                && f.method
                    .as_deref()
                    .is_none_or(|m| m.eq_ignore_ascii_case(&method))
        });
        hit.map(|f| {
            f.times -= 1;
            f.clone()
        })
    };
    if let Some(fault) = fault {
        let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let mut response = error(
            status,
            fault.code.as_deref().unwrap_or("INJECTED"),
            "injected fault",
        );
        if let Some(secs) = fault.retry_after_secs {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        return response;
    }
    next.run(request).await
}

/// Paths kept in the request log (older ones are dropped).
const MAX_LOG: usize = 100_000;
