//! The data plane: processes and files of the sandbox named by the
//! `X-Tensorlake-Sandbox-Id` header.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use nix::sys::signal::Signal;
use serde::Deserialize;

use crate::host::{self, Launch, Proc};
use crate::reply::{Reply, error};
use crate::state::{Shared, Status};

pub(crate) const SANDBOX_ID_HEADER: &str = "x-tensorlake-sandbox-id";

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v1/processes", post(start).get(list))
        .route("/api/v1/processes/{key}", get(get_one).delete(kill))
        .route("/api/v1/processes/{key}/signal", post(signal))
        .route("/api/v1/processes/{key}/output", get(output_all))
        .route("/api/v1/processes/{key}/stdout", get(output_stdout))
        .route("/api/v1/processes/{key}/stderr", get(output_stderr))
        .route("/api/v1/processes/{key}/output/follow", get(follow_all))
        .route("/api/v1/processes/{key}/stdout/follow", get(follow_stdout))
        .route("/api/v1/processes/{key}/stderr/follow", get(follow_stderr))
        .route("/api/v1/processes/run", post(run))
}

/// The sandbox a data-plane request is for, and its directory, if it runs
/// (a suspended one is woken only when created with `auto_resume`).
pub(crate) fn target(shared: &Shared, headers: &HeaderMap) -> Result<(String, PathBuf), Response> {
    let id = headers
        .get(SANDBOX_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            // The SDKs' local form: `Host: <id>.local`.
            let host = headers.get("host")?.to_str().ok()?;
            host.strip_suffix(".local").map(str::to_owned)
        })
        .ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                "INVALID_REQUEST",
                "no X-Tensorlake-Sandbox-Id",
            )
        })?;
    let wake = {
        let mut inner = shared.lock();
        let sandbox = inner.sandboxes.get_mut(&id).ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                "SANDBOX_NOT_FOUND",
                "sandbox not found",
            )
        })?;
        sandbox.last_activity = Instant::now();
        match sandbox.status {
            Status::Running | Status::Snapshotting => return Ok((id, sandbox.dir.clone())),
            Status::Suspended if sandbox.auto_resume => true,
            Status::Terminated | Status::Failed => {
                return Err(error(
                    StatusCode::NOT_FOUND,
                    "SANDBOX_NOT_FOUND",
                    "sandbox not found",
                ));
            }
            other => {
                return Err(error(
                    StatusCode::CONFLICT,
                    "SANDBOX_NOT_RUNNING",
                    &format!("sandbox is {}", other.as_str()),
                ));
            }
        }
    };
    if wake {
        crate::lifecycle::resume_now(shared, &id)
            .map_err(|r| error(r.status, r.code, &r.message))?;
    }
    let dir = shared
        .lock()
        .sandboxes
        .get(&id)
        .map(|s| s.dir.clone())
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                "SANDBOX_NOT_FOUND",
                "sandbox not found",
            )
        })?;
    Ok((id, dir))
}

fn find(shared: &Shared, id: &str, key: &str) -> Result<Arc<Proc>, Response> {
    let inner = shared.lock();
    let sandbox = inner.sandboxes.get(id).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            "SANDBOX_NOT_FOUND",
            "sandbox not found",
        )
    })?;
    host::lookup(&sandbox.processes, key)
        .cloned()
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                "PROCESS_NOT_FOUND",
                "process not found",
            )
        })
}

#[derive(Deserialize)]
struct StartBody {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// Starts what `raw` asks for in sandbox `id` and records it there.
fn launch(
    shared: &Shared,
    id: &str,
    dir: &std::path::Path,
    raw: serde_json::Value,
) -> Result<Arc<Proc>, Response> {
    shared
        .process_starts
        .lock()
        .expect("process starts")
        .push(raw.clone());
    let body: StartBody = serde_json::from_value(raw)
        .map_err(|e| error(StatusCode::BAD_REQUEST, "INVALID_REQUEST", &e.to_string()))?;
    if let Some(name) = &body.name
        && (name.is_empty() || name.contains('/') || name.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "invalid process name",
        ));
    }
    let cwd = match &body.working_dir {
        Some(path) => host::inside(dir, path).ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                "INVALID_PATH",
                "working_dir is outside the sandbox",
            )
        })?,
        None => dir.to_path_buf(),
    };
    // Held across the spawn so that two starts of one name cannot race.
    let mut inner = shared.lock();
    let sandbox = inner.sandboxes.get_mut(id).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            "SANDBOX_NOT_FOUND",
            "sandbox not found",
        )
    })?;
    if let Some(name) = &body.name
        && sandbox
            .processes
            .iter()
            .any(|p| p.name.as_ref() == Some(name))
    {
        return Err(error(
            StatusCode::CONFLICT,
            "PROCESS_EXISTS",
            "a process with that name exists",
        ));
    }
    let proc = host::spawn(Launch {
        command: body.command,
        args: body.args,
        env: body.env,
        cwd,
        name: body.name,
    })
    .map_err(|e| error(StatusCode::BAD_REQUEST, "SPAWN_FAILED", &e.to_string()))?;
    sandbox.next_pid += 1;
    sandbox.processes.push(proc.clone());
    Ok(proc)
}

async fn start(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(raw): Json<serde_json::Value>,
) -> Reply {
    let (id, dir) = target(&shared, &headers)?;
    let proc = launch(&shared, &id, &dir, raw)?;
    Ok(Json(proc.info()).into_response())
}

/// `POST /api/v1/processes/run`: starts a process and streams, as
/// server-sent events, `{pid, started_at}`, its output lines and
/// `{exit_code, signal}` once it has ended.
async fn run(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(raw): Json<serde_json::Value>,
) -> Reply {
    let (id, dir) = target(&shared, &headers)?;
    let proc = launch(&shared, &id, &dir, raw)?;
    let started = serde_json::json!({
        "pid": proc.pid,
        "started_at": proc.started_ms as f64 / 1000.0,
    });
    let head = futures::stream::once(async move {
        Ok::<_, Infallible>(Event::default().data(started.to_string()))
    });
    let exited = proc.clone();
    let tail = futures::stream::once(async move {
        let exit = exited.state.lock().expect("proc").exit;
        let (code, signal) = match exit {
            Some(host::Exit::Code(c)) => (Some(c), None),
            Some(host::Exit::Signal(s)) => (None, Some(s)),
            None => (None, None),
        };
        let reason = if signal.is_some() {
            "signaled"
        } else {
            "exited"
        };
        let data = serde_json::json!({ "exit_code": code, "signal": signal, "reason": reason });
        Ok::<_, Infallible>(Event::default().data(data.to_string()))
    });
    let body = head.chain(follow_stream(proc, None)).chain(tail);
    Ok(Sse::new(body).into_response())
}

async fn list(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    let inner = shared.lock();
    let processes: Vec<_> = inner
        .sandboxes
        .get(&id)
        .map(|s| s.processes.iter().map(|p| p.info()).collect())
        .unwrap_or_default();
    Ok(Json(serde_json::json!({ "processes": processes })).into_response())
}

async fn get_one(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    Ok(Json(find(&shared, &id, &key)?.info()).into_response())
}

#[derive(Deserialize)]
struct SignalBody {
    signal: i32,
}

fn send(proc: &Proc, number: i32) -> bool {
    let Ok(signal) = Signal::try_from(number) else {
        return false;
    };
    if !proc.running() {
        return false;
    }
    proc.group.signal(signal);
    true
}

async fn signal(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    Json(body): Json<SignalBody>,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    let proc = find(&shared, &id, &key)?;
    let success = send(&proc, body.signal);
    Ok(Json(serde_json::json!({ "success": success })).into_response())
}

async fn kill(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    let proc = find(&shared, &id, &key)?;
    send(&proc, Signal::SIGKILL as i32);
    Ok(Json(serde_json::json!({})).into_response())
}

fn lines_of(proc: &Proc, stream: Option<&str>) -> Response {
    let state = proc.state.lock().expect("proc");
    let lines: Vec<&str> = state
        .lines
        .iter()
        .filter(|(s, _)| stream.is_none_or(|want| *s == want))
        .map(|(_, l)| l.as_str())
        .collect();
    Json(serde_json::json!({ "pid": proc.pid, "line_count": lines.len(), "lines": lines }))
        .into_response()
}

async fn output_all(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    Ok(lines_of(&*find(&shared, &id, &key)?, None))
}

async fn output_stdout(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    Ok(lines_of(&*find(&shared, &id, &key)?, Some("stdout")))
}

async fn output_stderr(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    Ok(lines_of(&*find(&shared, &id, &key)?, Some("stderr")))
}

async fn follow_all(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    follow(&shared, &headers, &key, None)
}

async fn follow_stdout(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    follow(&shared, &headers, &key, Some("stdout"))
}

async fn follow_stderr(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Reply {
    follow(&shared, &headers, &key, Some("stderr"))
}

/// Every line so far of `stream` (both when `None`), then new ones, ending
/// once the process has exited and all were sent.
fn follow(shared: &Shared, headers: &HeaderMap, key: &str, stream: Option<&'static str>) -> Reply {
    let (id, _) = target(shared, headers)?;
    let proc = find(shared, &id, key)?;
    Ok(Sse::new(follow_stream(proc, stream)).into_response())
}

fn follow_stream(
    proc: Arc<Proc>,
    only: Option<&'static str>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let changed = proc.changed.subscribe();
    futures::stream::unfold(
        (proc, changed, 0usize),
        move |(proc, mut changed, mut next)| async move {
            loop {
                let (line, exited) = {
                    let state = proc.state.lock().expect("proc");
                    let index = next.saturating_sub(state.dropped);
                    (state.lines.get(index).cloned(), state.exit.is_some())
                };
                if let Some((stream, line)) = line {
                    next += 1;
                    if only.is_some_and(|want| want != stream) {
                        continue;
                    }
                    let data = serde_json::json!({
                        "line": line, "stream": stream, "timestamp": host::now_ms(),
                    });
                    let event = Event::default().data(data.to_string());
                    return Some((Ok(event), (proc, changed, next)));
                }
                if exited {
                    return None;
                }
                if changed.changed().await.is_err() {
                    return None;
                }
            }
        },
    )
}
