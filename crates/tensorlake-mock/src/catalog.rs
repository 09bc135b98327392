//! The sandbox-image catalog, as the official SDK's merged catalog reaches
//! it (`src/sandbox_image_catalog.rs` and `src/sandbox_templates/mod.rs`
//! of the `tensorlake` crate 0.5.160, read, not copied):
//!
//! - the CAS image registry behind the API host's `/images/v4` ingress:
//!   `POST /images/v4/images/from-snapshot` (`{name, snapshot_id, public}`
//!   under an `Idempotency-Key`; 201 with the image), `GET /images/v4/images`
//!   (`?page_size=&cursor=`; `{items, pagination: {next}}`),
//!   `GET|DELETE /images/v4/images/name/{name}` and `/images/v4/images/{id}`
//!   (404 when unknown, 204 on delete);
//! - the legacy template registry (`/platform/v1/sandbox-templates`), which
//!   the SDK lists beside it and falls back to on a CAS 404: always empty
//!   here (the mock registers only CAS images).
//!
//! Registering keeps its own copy of the snapshot's archive, so deleting
//! the snapshot later leaves the image usable; a sandbox created with
//! `image` naming a catalog image (by name or `image_` id) starts from it.
//! A second registration under a name replaces the image the name holds,
//! keeping its id (the service's `image_` id names "the current image under
//! the name"). A replayed `Idempotency-Key` answers the first result.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

pub(crate) mod images;

use crate::reply::{Reply, error};
use crate::state::{Inner, Shared, new_id};
use images::CatalogImage;

/// Longest page of `GET /images`.
const MAX_PAGE: usize = 100;
/// Idempotency keys remembered; the oldest are forgotten past this.
const MAX_KEYS: usize = 10_000;

/// The archive a sandbox created with `image` starts from, when `image`
/// names a catalog image.
pub(crate) fn archive_for(inner: &Inner, image: &str) -> Option<PathBuf> {
    inner.catalog.resolve(image).map(|i| i.archive.clone())
}

/// The CAS image registry's name grammar: lowercase repository components
/// joined by `/`, each alphanumeric runs joined by single `.`, `_` or `-`,
/// an optional `:tag`; at most 255 bytes; no reserved id prefix.
pub(crate) fn valid_image_name(name: &str) -> bool {
    if name.is_empty()
        || name.len() > 255
        || ["image_", "sandbox_template_", "cas-v1:"]
            .iter()
            .any(|p| name.starts_with(p))
    {
        return false;
    }
    let (repository, tag) = match name.split_once(':') {
        Some((repository, tag)) => (repository, Some(tag)),
        None => (name, None),
    };
    let component_ok = |c: &str| {
        let mut after_separator = true;
        for b in c.bytes() {
            let separator = matches!(b, b'.' | b'_' | b'-');
            let alphanumeric = b.is_ascii_lowercase() || b.is_ascii_digit();
            if (separator && after_separator) || !(separator || alphanumeric) {
                return false;
            }
            after_separator = separator;
        }
        !c.is_empty() && !after_separator
    };
    let tag_ok = tag.is_none_or(|t| {
        !t.is_empty()
            && t.len() <= 128
            && !t.starts_with(['.', '-'])
            && t.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    });
    repository.split('/').all(component_ok) && tag_ok
}

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/images/v4/images/from-snapshot", post(register))
        .route("/images/v4/images", get(list))
        .route(
            "/images/v4/images/name/{*name}",
            get(get_by_name).delete(delete_by_name),
        )
        .route(
            "/images/v4/images/{id}",
            get(get_by_id).delete(delete_by_id),
        )
        .route("/platform/v1/sandbox-templates", get(list_templates))
        .route(
            "/platform/v1/sandbox-templates/by-name/{*name}",
            get(no_template).delete(no_template),
        )
        .route(
            "/platform/v1/sandbox-templates/{id}",
            get(no_template).delete(no_template),
        )
}

/// The CAS registry's error body: `{"error", "code"}`.
fn refuse(status: StatusCode, code: &str, message: &str) -> Response {
    error(status, code, message)
}

fn not_found(what: &str) -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("{what} not found"),
    )
}

#[derive(Deserialize)]
struct RegisterBody {
    name: String,
    snapshot_id: String,
    #[serde(default)]
    public: bool,
}

async fn register(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Reply {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty() && k.len() <= 256)
        .map(str::to_owned)
        .ok_or_else(|| {
            refuse(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "an Idempotency-Key header is required",
            )
        })?;
    let body: RegisterBody = serde_json::from_slice(&body)
        .map_err(|e| refuse(StatusCode::BAD_REQUEST, "invalid_request", &e.to_string()))?;
    let name = body.name.to_ascii_lowercase();
    if !valid_image_name(&name) {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_name",
            &format!("invalid image name {:?}", body.name),
        ));
    }
    if body.public {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only allowlisted publisher projects may register global images",
        ));
    }
    let source = {
        let inner = shared.lock();
        if let Some((seen_name, seen_snapshot)) = inner.catalog.answered.get(&key) {
            if *seen_name != name || *seen_snapshot != body.snapshot_id {
                return Err(refuse(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "client_request_id_mismatch",
                    "the Idempotency-Key was used for another request",
                ));
            }
            let image = inner.catalog.by_name.get(&name).ok_or_else(|| {
                refuse(StatusCode::GONE, "image_deleted", "the image was deleted")
            })?;
            return Ok((StatusCode::CREATED, Json(image.info())).into_response());
        }
        match inner.snapshots.get(&body.snapshot_id) {
            Some(s) if s.status.usable() => s.archive.clone(),
            Some(_) => {
                return Err(refuse(
                    StatusCode::CONFLICT,
                    "snapshot_not_ready",
                    "the snapshot is not complete yet",
                ));
            }
            None => return Err(not_found("snapshot")),
        }
    };
    let archive = shared
        .config
        .root
        .join("images")
        .join(format!("{}.tar", new_id()));
    let copied = tokio::task::spawn_blocking({
        let archive = archive.clone();
        move || {
            std::fs::create_dir_all(archive.parent().expect("images dir"))?;
            std::fs::hard_link(&source, &archive)
                .or_else(|_| std::fs::copy(&source, &archive).map(|_| ()))?;
            std::fs::metadata(&archive).map(|m| m.len())
        }
    })
    .await
    .map_err(|e| {
        refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &e.to_string(),
        )
    })?
    .map_err(|e| {
        refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            &e.to_string(),
        )
    })?;
    let now = now_rfc3339();
    let mut inner = shared.lock();
    let catalog = &mut inner.catalog;
    if catalog.answered.len() >= MAX_KEYS {
        catalog.answered.clear();
    }
    catalog
        .answered
        .insert(key, (name.clone(), body.snapshot_id.clone()));
    let (id, created_at, old) = match catalog.by_name.get(&name) {
        Some(old) => (
            old.id.clone(),
            old.created_at.clone(),
            Some(old.archive.clone()),
        ),
        None => (format!("image_{}", new_id()), now.clone(), None),
    };
    let image = CatalogImage {
        id,
        name: name.clone(),
        snapshot_id: body.snapshot_id,
        public: false,
        archive,
        size: copied,
        created_at,
        updated_at: now,
    };
    let info = image.info();
    catalog.by_name.insert(name, image);
    drop(inner);
    if let Some(old) = old {
        let _ = std::fs::remove_file(old);
    }
    Ok((StatusCode::CREATED, Json(info)).into_response())
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    page_size: Option<usize>,
    #[serde(default)]
    cursor: Option<String>,
}

/// Pages in name order; the cursor is the last name of the page before.
async fn list(State(shared): State<Arc<Shared>>, Query(query): Query<ListQuery>) -> Reply {
    let size = query.page_size.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    let inner = shared.lock();
    let after = query.cursor.unwrap_or_default();
    let mut page: Vec<&CatalogImage> = inner
        .catalog
        .by_name
        .range::<String, _>((
            std::ops::Bound::Excluded(after.clone()),
            std::ops::Bound::Unbounded,
        ))
        .map(|(_, image)| image)
        .take(size + 1)
        .collect();
    let more = page.len() > size;
    page.truncate(size);
    let next = more.then(|| page.last().map(|i| i.name.clone())).flatten();
    let items: Vec<_> = page.iter().map(|i| i.info()).collect();
    Ok(Json(serde_json::json!({
        "items": items,
        "pagination": { "next": next },
    }))
    .into_response())
}

async fn get_by_name(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Reply {
    let inner = shared.lock();
    let image = inner
        .catalog
        .by_name
        .get(&name.to_ascii_lowercase())
        .ok_or_else(|| not_found("image"))?;
    Ok(Json(image.info()).into_response())
}

async fn get_by_id(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
    let inner = shared.lock();
    let image = inner
        .catalog
        .by_name
        .values()
        .find(|i| i.id == id)
        .ok_or_else(|| not_found("image"))?;
    Ok(Json(image.info()).into_response())
}

async fn delete_by_name(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Reply {
    let removed = shared
        .lock()
        .catalog
        .by_name
        .remove(&name.to_ascii_lowercase())
        .ok_or_else(|| not_found("image"))?;
    let _ = std::fs::remove_file(&removed.archive);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn delete_by_id(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Reply {
    let removed = {
        let mut inner = shared.lock();
        let name = inner
            .catalog
            .by_name
            .values()
            .find(|i| i.id == id)
            .map(|i| i.name.clone())
            .ok_or_else(|| not_found("image"))?;
        inner.catalog.by_name.remove(&name)
    };
    if let Some(removed) = removed {
        let _ = std::fs::remove_file(&removed.archive);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The legacy registry holds nothing in the mock.
async fn list_templates() -> Response {
    Json(serde_json::json!({ "items": [], "pagination": { "next": null } })).into_response()
}

async fn no_template() -> Response {
    not_found("sandbox template")
}

/// Now as RFC 3339 UTC with milliseconds, as the registry writes times.
fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_follow_the_registry_grammar() {
        for ok in ["app", "team/app:v1.2-rc", "garrison-session", "a.b_c-d"] {
            assert!(valid_image_name(ok), "{ok}");
        }
        for bad in [
            "",
            "App",
            "-app",
            "app-",
            "a--b",
            "team//app",
            "app:.x",
            "image_x",
            "sandbox_template_x",
            &"a".repeat(256),
        ] {
            assert!(!valid_image_name(bad), "{bad}");
        }
    }
}
