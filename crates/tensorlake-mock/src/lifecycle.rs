//! The lifecycle API: sandboxes and snapshots.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nix::sys::signal::Signal;
use serde::Deserialize;

use crate::host;
use crate::reply::{Reply, error};
use crate::state::{self, Refusal, Shared, Snapshot, SnapshotStatus, Status};

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/sandboxes", post(crate::create::create).get(list))
        .route("/sandboxes/{id}", get(get_one).delete(delete).patch(update))
        .route("/sandboxes/{id}/suspend", post(suspend))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/snapshot", post(snapshot))
        .route("/snapshots", get(list_snapshots))
        .route("/snapshots/{id}", get(get_snapshot).delete(delete_snapshot))
}

fn refused(r: Refusal) -> Response {
    error(r.status, r.code, &r.message)
}

fn not_found(what: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        &format!("{what} not found"),
    )
}

/// Sandboxes a listing page holds, as the service pages them.
pub(crate) const PAGE_SIZE: usize = 100;

#[derive(Deserialize)]
struct PageQuery {
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// One page of ids in a stable order: those after `cursor`, at most
/// `limit`, and the cursor of the next page when more remain.
pub(crate) fn page<'a>(
    mut ids: Vec<&'a str>,
    cursor: Option<&str>,
    limit: usize,
) -> (Vec<&'a str>, Option<String>) {
    ids.sort_unstable();
    let start = cursor.map_or(0, |c| ids.partition_point(|id| *id <= c));
    let rest = &ids[start..];
    let taken: Vec<&str> = rest.iter().take(limit).copied().collect();
    let next = (rest.len() > taken.len()).then(|| taken.last().map(|s| s.to_string()));
    (taken, next.flatten())
}

async fn list(State(shared): State<Arc<Shared>>, Query(query): Query<PageQuery>) -> Response {
    let inner = shared.lock();
    let ids = inner
        .sandboxes
        .values()
        .filter(|s| s.status != Status::Terminated)
        .map(|s| s.id.as_str())
        .collect();
    let limit = query.limit.unwrap_or(PAGE_SIZE).clamp(1, PAGE_SIZE);
    let (ids, cursor) = page(ids, query.cursor.as_deref(), limit);
    let sandboxes: Vec<_> = ids
        .iter()
        .filter_map(|id| inner.sandboxes.get(*id))
        .map(|s| s.info(&shared.url))
        .collect();
    Json(serde_json::json!({ "sandboxes": sandboxes, "cursor": cursor })).into_response()
}

/// The id `key` (an id or a name) stands for.
fn resolve(shared: &Shared, key: &str) -> Result<String, Response> {
    shared
        .lock()
        .resolve(key)
        .map(str::to_owned)
        .ok_or_else(|| not_found("sandbox"))
}

async fn get_one(State(shared): State<Arc<Shared>>, Path(key): Path<String>) -> Reply {
    let id = resolve(&shared, &key)?;
    let inner = shared.lock();
    let sandbox = inner
        .sandboxes
        .get(&id)
        .ok_or_else(|| not_found("sandbox"))?;
    Ok(Json(sandbox.info(&shared.url)).into_response())
}

#[derive(Deserialize)]
struct UpdateBody {
    #[serde(default)]
    network: Option<serde_json::Value>,
}

async fn update(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
    Json(body): Json<UpdateBody>,
) -> Reply {
    let id = resolve(&shared, &key)?;
    let mut inner = shared.lock();
    let sandbox = inner
        .sandboxes
        .get_mut(&id)
        .ok_or_else(|| not_found("sandbox"))?;
    if let Some(network) = body.network {
        sandbox.network = (!network.is_null()).then_some(network);
    }
    Ok(Json(sandbox.info(&shared.url)).into_response())
}

/// Deleting is asynchronous, as on the service: the sandbox is
/// `terminated` at once (its processes killed, its name free) and gone
/// after the transition.
async fn delete(State(shared): State<Arc<Shared>>, Path(key): Path<String>) -> Reply {
    let id = resolve(&shared, &key)?;
    {
        let mut inner = shared.lock();
        let sandbox = inner
            .sandboxes
            .get_mut(&id)
            .filter(|s| s.status != Status::Terminated)
            .ok_or_else(|| not_found("sandbox"))?;
        sandbox.status = Status::Terminated;
        sandbox.signal_all(Signal::SIGKILL);
        sandbox.signal_all(Signal::SIGCONT);
        for pty in sandbox.ptys.values() {
            pty.kick("sandbox terminated");
        }
    }
    let later = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(later.config.transition).await;
        let removed = later.lock().sandboxes.remove(&id);
        if let Some(sandbox) = removed {
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(sandbox.dir)).await;
        }
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "sandbox_id": key, "status": "terminated" })),
    )
        .into_response())
}

/// Starts suspending a sandbox; it is `suspended` after the transition.
pub(crate) fn begin_suspend(shared: &Arc<Shared>, id: &str) -> Result<(), Refusal> {
    {
        let mut inner = shared.lock();
        let Some(sandbox) = inner.sandboxes.get_mut(id) else {
            return Err(Refusal {
                status: StatusCode::NOT_FOUND,
                code: "NOT_FOUND",
                message: "sandbox not found".into(),
            });
        };
        match state::on_suspend(sandbox.status, sandbox.name.is_some())? {
            None => return Ok(()),
            Some(next) => sandbox.status = next,
        }
    }
    let shared = shared.clone();
    let id = id.to_owned();
    tokio::spawn(async move {
        tokio::time::sleep(shared.config.transition).await;
        let mut inner = shared.lock();
        if let Some(sandbox) = inner.sandboxes.get_mut(&id)
            && sandbox.status == Status::Suspending
        {
            // The memory is kept: the processes are only stopped.
            sandbox.signal_all(Signal::SIGSTOP);
            for pty in sandbox.ptys.values() {
                pty.kick("sandbox suspended");
            }
            sandbox.status = Status::Suspended;
        }
    });
    Ok(())
}

/// Resumes a suspended sandbox at once.
pub(crate) fn resume_now(shared: &Shared, id: &str) -> Result<(), Refusal> {
    let mut inner = shared.lock();
    let Some(sandbox) = inner.sandboxes.get_mut(id) else {
        return Err(Refusal {
            status: StatusCode::NOT_FOUND,
            code: "NOT_FOUND",
            message: "sandbox not found".into(),
        });
    };
    if let Some(next) = state::on_resume(sandbox.status, sandbox.name.is_some())? {
        sandbox.signal_all(Signal::SIGCONT);
        sandbox.status = next;
        sandbox.last_activity = Instant::now();
    }
    Ok(())
}

/// `wait_ms`: how long a suspend or resume may hold the request open for
/// the transition to finish (the service caps it at 30 s).
#[derive(Deserialize)]
struct WaitQuery {
    #[serde(default)]
    wait_ms: Option<u64>,
}

const MAX_LIFECYCLE_WAIT: Duration = Duration::from_secs(30);

/// 200 once the sandbox is `want` within `wait_ms`, 202 otherwise (also
/// without `wait_ms`: the transition continues).
async fn answer_when(shared: &Shared, id: &str, want: Status, wait_ms: Option<u64>) -> Response {
    shared
        .lifecycle_waits
        .lock()
        .expect("lifecycle waits")
        .push(wait_ms);
    let done = |shared: &Shared| shared.lock().sandboxes.get(id).map(|s| s.status) == Some(want);
    if let Some(wait_ms) = wait_ms {
        let deadline = Instant::now() + Duration::from_millis(wait_ms).min(MAX_LIFECYCLE_WAIT);
        while !done(shared) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if done(shared) {
            return Json(serde_json::json!({ "sandbox_id": id, "status": want.as_str() }))
                .into_response();
        }
    }
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "sandbox_id": id })),
    )
        .into_response()
}

async fn suspend(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
    Query(query): Query<WaitQuery>,
) -> Reply {
    let id = resolve(&shared, &key)?;
    begin_suspend(&shared, &id).map_err(refused)?;
    Ok(answer_when(&shared, &id, Status::Suspended, query.wait_ms).await)
}

async fn resume(
    State(shared): State<Arc<Shared>>,
    Path(key): Path<String>,
    Query(query): Query<WaitQuery>,
) -> Reply {
    let id = resolve(&shared, &key)?;
    resume_now(&shared, &id).map_err(refused)?;
    Ok(answer_when(&shared, &id, Status::Running, query.wait_ms).await)
}

async fn snapshot(State(shared): State<Arc<Shared>>, Path(key): Path<String>) -> Reply {
    let id = resolve(&shared, &key)?;
    let snapshot_id = state::new_id();
    let archive = shared
        .config
        .root
        .join("snapshots")
        .join(format!("{snapshot_id}.tar"));
    let (dir, _image) = {
        let mut inner = shared.lock();
        let sandbox = inner
            .sandboxes
            .get_mut(&id)
            .ok_or_else(|| not_found("sandbox"))?;
        sandbox.status = state::on_snapshot(sandbox.status).map_err(refused)?;
        let out = (sandbox.dir.clone(), sandbox.image.clone());
        inner.snapshots.insert(
            snapshot_id.clone(),
            Snapshot {
                id: snapshot_id.clone(),
                sandbox_id: id.clone(),
                status: SnapshotStatus::InProgress,
                archive: archive.clone(),
                size: 0,
                base_image: out.1.clone(),
            },
        );
        out
    };
    let later = shared.clone();
    let snap = snapshot_id.clone();
    tokio::spawn(async move {
        let packed = tokio::task::spawn_blocking(move || host::pack(&dir, &archive)).await;
        let mut inner = later.lock();
        if let Some(sandbox) = inner.sandboxes.get_mut(&id)
            && sandbox.status == Status::Snapshotting
        {
            sandbox.status = Status::Running;
        }
        match packed {
            Ok(Ok(size)) => {
                if let Some(s) = inner.snapshots.get_mut(&snap) {
                    s.status = SnapshotStatus::LocalReady;
                    s.size = size;
                }
                // Usable here at once; `completed` once "replicated".
                let replicated = later.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(replicated.config.transition).await;
                    if let Some(s) = replicated.lock().snapshots.get_mut(&snap) {
                        s.status = SnapshotStatus::Completed;
                    }
                });
            }
            _ => {
                inner.snapshots.remove(&snap);
            }
        }
    });
    Ok(
        Json(serde_json::json!({ "snapshot_id": snapshot_id, "status": "in_progress" }))
            .into_response(),
    )
}

async fn list_snapshots(State(shared): State<Arc<Shared>>) -> Response {
    let inner = shared.lock();
    let snapshots: Vec<_> = inner.snapshots.values().map(Snapshot::info).collect();
    Json(serde_json::json!({ "snapshots": snapshots })).into_response()
}

async fn get_snapshot(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
    let inner = shared.lock();
    let snapshot = inner
        .snapshots
        .get(&id)
        .ok_or_else(|| not_found("snapshot"))?;
    Ok(Json(snapshot.info()).into_response())
}

async fn delete_snapshot(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
    let snapshot = shared
        .lock()
        .snapshots
        .remove(&id)
        .ok_or_else(|| not_found("snapshot"))?;
    let _ = std::fs::remove_file(&snapshot.archive);
    Ok(Json(serde_json::json!({})).into_response())
}

/// Suspends named sandboxes idle for their `timeout_secs`, when enabled.
pub(crate) async fn idle_ticker(shared: Arc<Shared>) {
    if !shared.config.idle_suspend {
        return;
    }
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let idle: Vec<String> = shared
            .lock()
            .sandboxes
            .values()
            .filter(|s| {
                s.status == Status::Running
                    && s.name.is_some()
                    && s.timeout_secs > 0
                    && s.last_activity.elapsed() >= Duration::from_secs(s.timeout_secs)
            })
            .map(|s| s.id.clone())
            .collect();
        for id in idle {
            let _ = begin_suspend(&shared, &id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::page;

    #[test]
    fn pages_follow_the_cursor_to_the_end() {
        let ids = ["c", "a", "e", "b", "d"];
        let (first, cursor) = page(ids.to_vec(), None, 2);
        assert_eq!(first, ["a", "b"]);
        let (second, cursor) = page(ids.to_vec(), cursor.as_deref(), 2);
        assert_eq!(second, ["c", "d"]);
        let (last, cursor) = page(ids.to_vec(), cursor.as_deref(), 2);
        assert_eq!(last, ["e"]);
        assert_eq!(cursor, None);
        let (exact, cursor) = page(vec!["a", "b"], None, 2);
        assert_eq!((exact.len(), cursor), (2, None));
    }
}
