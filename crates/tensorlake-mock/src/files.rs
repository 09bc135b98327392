//! The files API of the sandbox a request names: read, write, delete and
//! list, at host paths inside the sandbox's directory.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::dataplane::target;
use crate::host;
use crate::reply::{Reply, error};
use crate::state::Shared;

/// Largest file the files API takes.
const MAX_FILE: usize = 512 << 20;
/// Most entries a listing returns.
const MAX_ENTRIES: usize = 10_000;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route(
            "/api/v1/files",
            get(read_file)
                .put(write_file)
                .delete(delete_file)
                .layer(axum::extract::DefaultBodyLimit::max(MAX_FILE)),
        )
        .route("/api/v1/files/list", get(list_directory))
}

#[derive(Deserialize)]
struct PathQuery {
    path: String,
}

fn file_path(dir: &std::path::Path, path: &str) -> Result<PathBuf, Response> {
    host::inside(dir, path).ok_or_else(|| {
        error(
            StatusCode::BAD_REQUEST,
            "INVALID_PATH",
            "path is outside the sandbox",
        )
    })
}

async fn read_file(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<PathQuery>,
) -> Reply {
    let (_, dir) = target(&shared, &headers)?;
    let path = file_path(&dir, &query.path)?;
    match tokio::fs::read(&path).await {
        Ok(bytes) => Ok(bytes.into_response()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(error(
            StatusCode::NOT_FOUND,
            "FILE_NOT_FOUND",
            "no such file",
        )),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, "FILE_ERROR", &e.to_string())),
    }
}

async fn write_file(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<PathQuery>,
    body: axum::body::Bytes,
) -> Reply {
    let (_, dir) = target(&shared, &headers)?;
    let path = file_path(&dir, &query.path)?;
    let write = async {
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        tokio::fs::write(&path, &body).await
    };
    write
        .await
        .map_err(|e| error(StatusCode::BAD_REQUEST, "FILE_ERROR", &e.to_string()))?;
    Ok(Json(serde_json::json!({})).into_response())
}

fn file_error(e: std::io::Error) -> Response {
    if e.kind() == std::io::ErrorKind::NotFound {
        error(StatusCode::NOT_FOUND, "FILE_NOT_FOUND", "no such file")
    } else {
        error(StatusCode::BAD_REQUEST, "FILE_ERROR", &e.to_string())
    }
}

async fn delete_file(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<PathQuery>,
) -> Reply {
    let (_, dir) = target(&shared, &headers)?;
    let path = file_path(&dir, &query.path)?;
    let metadata = tokio::fs::symlink_metadata(&path)
        .await
        .map_err(file_error)?;
    let removed = if metadata.is_dir() {
        tokio::fs::remove_dir_all(&path).await
    } else {
        tokio::fs::remove_file(&path).await
    };
    removed.map_err(file_error)?;
    Ok(Json(serde_json::json!({})).into_response())
}

async fn list_directory(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<PathQuery>,
) -> Reply {
    let (_, dir) = target(&shared, &headers)?;
    let path = file_path(&dir, &query.path)?;
    let mut reader = tokio::fs::read_dir(&path).await.map_err(file_error)?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry().await.map_err(file_error)? {
        if entries.len() >= MAX_ENTRIES {
            break;
        }
        let Ok(metadata) = entry.metadata().await else {
            continue;
        };
        let modified = metadata
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        entries.push(serde_json::json!({
            "name": entry.file_name().to_string_lossy(),
            "is_dir": metadata.is_dir(),
            "size": metadata.len(),
            "modified_at": modified,
        }));
    }
    Ok(Json(serde_json::json!({ "path": query.path, "entries": entries })).into_response())
}
