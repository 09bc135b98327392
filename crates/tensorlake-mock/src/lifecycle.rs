//! The lifecycle API: sandboxes and snapshots.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nix::sys::signal::Signal;
use serde::Deserialize;

use crate::host::{self, kill_group};
use crate::state::{self, Refusal, Sandbox, Shared, Snapshot, Status};
use crate::{Reply, error};

pub fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/sandboxes", post(create).get(list))
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

fn bad_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
}

#[derive(Deserialize)]
struct CreateBody {
    #[serde(default)]
    image: Option<String>,
    resources: serde_json::Value,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    network: Option<serde_json::Value>,
    #[serde(default)]
    snapshot_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    auto_resume: Option<bool>,
}

async fn create(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Reply {
    let raw: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| bad_request(&e.to_string()))?;
    *shared.last_create.lock().expect("last create") = Some(raw.clone());
    let body: CreateBody = serde_json::from_value(raw).map_err(|e| bad_request(&e.to_string()))?;
    if let Some(name) = &body.name
        && !state::valid_name(name)
    {
        return Err(bad_request("invalid sandbox name"));
    }
    let id = state::new_id();
    let dir = shared.config.root.join("sandboxes").join(&id);
    let sandbox = Sandbox {
        id: id.clone(),
        name: body.name.clone(),
        status: Status::Pending,
        image: body.image,
        resources: body.resources,
        timeout_secs: body.timeout_secs.unwrap_or(0),
        network: body.network,
        auto_resume: body.auto_resume.unwrap_or(true),
        dir: dir.clone(),
        processes: Vec::new(),
        ptys: HashMap::new(),
        last_activity: Instant::now(),
        next_pid: 0,
    };
    // The name is taken in the same step it is checked.
    let archive = {
        let mut inner = shared.lock();
        if let Some(name) = &body.name
            && inner
                .sandboxes
                .values()
                .any(|s| s.name.as_ref() == Some(name))
        {
            return Err(error(
                StatusCode::CONFLICT,
                "SANDBOX_NAME_IN_USE",
                &format!("a sandbox named {name} exists"),
            ));
        }
        let archive = match &body.snapshot_id {
            Some(snap) => match inner.snapshots.get(snap) {
                Some(s) if s.completed => Some(s.archive.clone()),
                _ => return Err(not_found("snapshot")),
            },
            // An image the catalog holds starts from its filesystem; any
            // other image name stands for an empty directory.
            None => sandbox
                .image
                .as_deref()
                .and_then(|image| crate::catalog::archive_for(&inner, image)),
        };
        inner.sandboxes.insert(id.clone(), sandbox);
        archive
    };
    let prepared = async {
        std::fs::create_dir_all(&dir)?;
        if let Some(archive) = archive {
            let target = dir.clone();
            tokio::task::spawn_blocking(move || host::unpack(&archive, &target))
                .await
                .map_err(std::io::Error::other)??;
        }
        Ok::<_, std::io::Error>(())
    };
    if let Err(e) = prepared.await {
        shared.lock().sandboxes.remove(&id);
        let _ = std::fs::remove_dir_all(&dir);
        return Err(internal(&e));
    }
    let later = shared.clone();
    let started = id.clone();
    tokio::spawn(async move {
        tokio::time::sleep(later.config.transition).await;
        if let Some(s) = later.lock().sandboxes.get_mut(&started)
            && s.status == Status::Pending
        {
            s.status = Status::Running;
            s.last_activity = Instant::now();
        }
    });
    Ok(Json(serde_json::json!({
        "sandbox_id": id,
        "status": "pending",
        "name": body.name,
        "sandbox_url": shared.url,
    }))
    .into_response())
}

fn internal(e: &dyn std::fmt::Display) -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "INTERNAL",
        &e.to_string(),
    )
}

async fn list(State(shared): State<Arc<Shared>>) -> Response {
    let inner = shared.lock();
    let sandboxes: Vec<_> = inner
        .sandboxes
        .values()
        .map(|s| s.info(&shared.url))
        .collect();
    Json(serde_json::json!({ "sandboxes": sandboxes })).into_response()
}

async fn get_one(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
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
    Path(id): Path<String>,
    Json(body): Json<UpdateBody>,
) -> Reply {
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

async fn delete(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
    let sandbox = shared
        .lock()
        .sandboxes
        .remove(&id)
        .ok_or_else(|| not_found("sandbox"))?;
    for group in sandbox.groups() {
        kill_group(group, Signal::SIGKILL);
        kill_group(group, Signal::SIGCONT);
    }
    for pty in sandbox.ptys.values() {
        pty.kick("sandbox terminated");
    }
    let dir = sandbox.dir.clone();
    tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir));
    Ok(Json(serde_json::json!({})).into_response())
}

/// Starts suspending a sandbox; it is `suspended` after the transition.
pub fn begin_suspend(shared: &Arc<Shared>, id: &str) -> Result<(), Refusal> {
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
            for group in sandbox.groups() {
                kill_group(group, Signal::SIGSTOP);
            }
            for pty in sandbox.ptys.values() {
                pty.kick("sandbox suspended");
            }
            sandbox.status = Status::Suspended;
        }
    });
    Ok(())
}

/// Resumes a suspended sandbox at once.
pub fn resume_now(shared: &Shared, id: &str) -> Result<(), Refusal> {
    let mut inner = shared.lock();
    let Some(sandbox) = inner.sandboxes.get_mut(id) else {
        return Err(Refusal {
            status: StatusCode::NOT_FOUND,
            code: "NOT_FOUND",
            message: "sandbox not found".into(),
        });
    };
    if let Some(next) = state::on_resume(sandbox.status, sandbox.name.is_some())? {
        for group in sandbox.groups() {
            kill_group(group, Signal::SIGCONT);
        }
        sandbox.status = next;
        sandbox.last_activity = Instant::now();
    }
    Ok(())
}

async fn suspend(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
    begin_suspend(&shared, &id).map_err(refused)?;
    Ok(Json(serde_json::json!({})).into_response())
}

async fn resume(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
    resume_now(&shared, &id).map_err(refused)?;
    Ok(Json(serde_json::json!({})).into_response())
}

async fn snapshot(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
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
                completed: false,
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
                    s.completed = true;
                    s.size = size;
                }
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
pub async fn idle_ticker(shared: Arc<Shared>) {
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
