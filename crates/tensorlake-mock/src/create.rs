//! `POST /sandboxes`: the blocking create the service answers once the
//! sandbox runs (200 `running`), when its wait runs out (504 `timeout`, the
//! sandbox left `pending`) or when the start fails (422 `failed`); with
//! `"wait": false` it answers at once (202 `pending`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::config::CreateOutcome;
use crate::host;
use crate::reply::{Reply, error};
use crate::state::{self, Sandbox, Shared, Status};

/// What the service gives a sandbox when the request leaves a size out.
const DEFAULT_CPUS: f64 = 1.0;
const DEFAULT_MEMORY_MB: u64 = 1024;
const DEFAULT_DISK_MB: u64 = 10 * 1024;
/// Longest a blocking create waits before answering `timeout`.
const MAX_CREATE_WAIT: Duration = Duration::from_secs(120);

#[derive(Deserialize)]
struct CreateBody {
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    resources: Option<serde_json::Value>,
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
    #[serde(default)]
    wait: Option<bool>,
}

/// The sandbox's resources: what was asked for, the service's defaults for
/// the rest.
pub(crate) fn resources_with_defaults(requested: Option<&serde_json::Value>) -> serde_json::Value {
    let field = |name: &str| requested.and_then(|r| r.get(name)).filter(|v| !v.is_null());
    serde_json::json!({
        "cpus": field("cpus").cloned().unwrap_or(DEFAULT_CPUS.into()),
        "memory_mb": field("memory_mb").cloned().unwrap_or(DEFAULT_MEMORY_MB.into()),
        "disk_mb": field("disk_mb").cloned().unwrap_or(DEFAULT_DISK_MB.into()),
    })
}

fn bad_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
}

/// The header with which a client asks for the answer this many ms before
/// its own timeout.
const GRACE_HEADER: &str = "x-tensorlake-request-timeout-grace-ms";

pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Reply {
    let grace = headers
        .get(GRACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    shared.create_graces.lock().expect("graces").push(grace);
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
        resources: resources_with_defaults(body.resources.as_ref()),
        timeout_secs: body.timeout_secs.unwrap_or(0),
        network: body.network,
        auto_resume: body.auto_resume.unwrap_or(true),
        created_at: state::unix_seconds(),
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
            && inner.resolve(name).is_some()
        {
            return Err(error(
                StatusCode::CONFLICT,
                "SANDBOX_NAME_IN_USE",
                &format!("a sandbox named {name} exists"),
            ));
        }
        let archive = match &body.snapshot_id {
            Some(snap) => match inner.snapshots.get(snap) {
                Some(s) if s.status.usable() => Some(s.archive.clone()),
                _ => {
                    return Err(error(
                        StatusCode::NOT_FOUND,
                        "NOT_FOUND",
                        "snapshot not found",
                    ));
                }
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
        return Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            &e.to_string(),
        ));
    }
    let record = |status: &str| {
        serde_json::json!({
            "sandbox_id": id,
            "status": status,
            "name": body.name,
            "sandbox_url": shared.url,
        })
    };
    let outcome = shared
        .create_outcomes
        .lock()
        .expect("create outcomes")
        .pop_front();
    match outcome {
        Some(CreateOutcome::Failed) => {
            if let Some(s) = shared.lock().sandboxes.get_mut(&id) {
                s.status = Status::Failed;
            }
            let mut answer = record("failed");
            answer["termination_reason"] = "startup_failed".into();
            answer["error_details"] = serde_json::json!({ "message": "the mock failed the start" });
            Ok((StatusCode::UNPROCESSABLE_ENTITY, Json(answer)).into_response())
        }
        Some(CreateOutcome::Timeout { pending_ms }) => {
            start_later(&shared, &id, Duration::from_millis(pending_ms));
            let mut answer = record("timeout");
            answer["pending_reason"] = "no_resources_available".into();
            Ok((StatusCode::GATEWAY_TIMEOUT, Json(answer)).into_response())
        }
        None => {
            start_later(&shared, &id, shared.config.transition);
            if body.wait == Some(false) {
                return Ok((StatusCode::ACCEPTED, Json(record("pending"))).into_response());
            }
            let deadline = Instant::now() + MAX_CREATE_WAIT;
            loop {
                let status = shared.lock().sandboxes.get(&id).map(|s| s.status);
                match status {
                    Some(Status::Pending) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Some(Status::Pending) => {
                        return Ok(
                            (StatusCode::GATEWAY_TIMEOUT, Json(record("timeout"))).into_response()
                        );
                    }
                    Some(status) => return Ok(Json(record(status.as_str())).into_response()),
                    None => return Err(error(StatusCode::NOT_FOUND, "NOT_FOUND", "deleted")),
                }
            }
        }
    }
}

/// Moves a pending sandbox to `running` after `after`.
fn start_later(shared: &Arc<Shared>, id: &str, after: Duration) {
    let shared = shared.clone();
    let id = id.to_owned();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        if let Some(s) = shared.lock().sandboxes.get_mut(&id)
            && s.status == Status::Pending
        {
            s.status = Status::Running;
            s.last_activity = Instant::now();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_sizes_get_the_service_defaults() {
        let asked = serde_json::json!({ "cpus": 2.0, "memory_mb": 4096 });
        let got = resources_with_defaults(Some(&asked));
        assert_eq!(got["cpus"], 2.0);
        assert_eq!(got["memory_mb"], 4096);
        assert_eq!(got["disk_mb"], DEFAULT_DISK_MB);
        let none = resources_with_defaults(None);
        assert_eq!(none["memory_mb"], DEFAULT_MEMORY_MB);
    }
}
