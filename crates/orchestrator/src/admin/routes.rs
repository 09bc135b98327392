//! The JSON API of [`crate::api`] over the state store, the session logs
//! and the queue views.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use fleet::SessionId;
use futures::Stream;
use serde::Deserialize;
use serde_json::json;

use super::listing::{self, SessionQuery};
use super::state::AdminState;
use crate::api::{
    LogChunk, OutpostView, SessionDetail, SessionPage, SessionSummary, StatusView, TerminateRequest,
};
use crate::queue::QueueView;
use crate::serving::TerminateError;
use crate::session_log::REMOTE_LOG;
use crate::settings::OutpostConfig;
use crate::store::SessionRecord;

/// Most bytes of log returned by one `/log` call or one SSE `log` event.
const LOG_CHUNK: u64 = 64 * 1024;
/// How often `/stream` looks for new output, events and stage changes.
const STREAM_POLL: Duration = Duration::from_millis(250);

pub(super) fn routes() -> Router<Arc<AdminState>> {
    Router::new()
        .route("/api/status", get(status))
        .route("/api/sessions", get(sessions))
        .route("/api/session-page", get(session_page))
        .route("/api/sessions/{id}", get(session))
        .route("/api/sessions/{id}/events", get(events))
        .route("/api/sessions/{id}/log", get(log))
        .route("/api/sessions/{id}/stream", get(stream))
        .route("/api/sessions/{id}/terminate", post(terminate))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn internal(e: anyhow::Error) -> Response {
    error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
}

/// Why a session could not be read.
enum Lookup {
    NotFound,
    Store(anyhow::Error),
}

/// The session id a route's path names, checked as the fleet API's are:
/// one that fails names no session here.
fn checked(id: String) -> Result<SessionId, Lookup> {
    SessionId::new(id).map_err(|_| Lookup::NotFound)
}

impl IntoResponse for Lookup {
    fn into_response(self) -> Response {
        match self {
            Self::NotFound => error(StatusCode::NOT_FOUND, "unknown session"),
            Self::Store(e) => internal(e),
        }
    }
}

/// Pending entries of the outpost's platform that are waiting for a worker.
pub(super) fn pending(view: &QueueView, outpost: &OutpostConfig) -> u64 {
    view.snapshot()
        .values()
        .filter(|e| {
            e.status.phase == fleet::Phase::Pending
                && e.spec.platform == outpost.platform
                && !matches!(
                    e.status.session_status,
                    fleet::SessionStatus::Suspended | fleet::SessionStatus::Terminated
                )
        })
        .count() as u64
}

impl AdminState {
    fn remote_log(&self, session_id: &str) -> PathBuf {
        self.sessions_dir
            .join(sandbox::hashed_id(session_id))
            .join(REMOTE_LOG)
    }

    fn summary(&self, rec: &SessionRecord) -> SessionSummary {
        let snapshot_bytes = self
            .serving
            .store
            .snapshots(&rec.session_id)
            .ok()
            .and_then(|snaps| {
                snaps
                    .iter()
                    .max_by_key(|s| s.snapshot.created_at_ms)
                    .map(|s| s.snapshot.size_bytes)
            });
        self.summary_with(rec, snapshot_bytes)
    }

    /// A session's summary, its newest snapshot's size already looked up
    /// (a listing looks every session's up in one query).
    fn summary_with(&self, rec: &SessionRecord, snapshot_bytes: Option<u64>) -> SessionSummary {
        let mut s = SessionSummary::from_record(rec);
        if let Some(o) = self
            .outposts
            .iter()
            .find(|o| o.outpost_id == rec.outpost_id)
        {
            s.cpus = Some(o.resources.cpus);
            s.memory_mb = Some(o.resources.memory_mb);
            s.disk_mb = Some(o.resources.disk_mb);
        }
        s.snapshot_bytes = snapshot_bytes;
        s
    }

    fn record(&self, session_id: &SessionId) -> Result<SessionRecord, Lookup> {
        match self.serving.store.session(session_id) {
            Ok(Some(rec)) => Ok(rec),
            Ok(None) => Err(Lookup::NotFound),
            Err(e) => Err(Lookup::Store(e)),
        }
    }
}

async fn status(State(state): State<Arc<AdminState>>) -> Response {
    let records = match state.serving.store.sessions() {
        Ok(r) => r,
        Err(e) => return internal(e),
    };
    let mut counts = BTreeMap::<String, u64>::new();
    for r in &records {
        *counts
            .entry(r.stage.label().as_str().to_owned())
            .or_default() += 1;
    }
    let outposts = state
        .serving
        .views
        .iter()
        .zip(&state.outposts)
        .map(|(view, o)| OutpostView {
            outpost_id: o.outpost_id.clone(),
            backend: o.backend.to_owned(),
            max_concurrent: o.max_concurrent,
            queue_synced_at_ms: view.synced_at(),
            watch_reconnects: view
                .watch_reconnects
                .load(std::sync::atomic::Ordering::Relaxed),
            pending: pending(view, o),
            held: records
                .iter()
                .filter(|r| r.outpost_id == o.outpost_id && !r.stage.is_done())
                .count() as u64,
        })
        .collect();
    let readiness = state.readiness(chrono::Utc::now().timestamp_millis());
    Json(StatusView {
        acceptor_id: state.serving.acceptor_id.clone(),
        version: state.version.to_owned(),
        started_at_ms: state.started_at_ms,
        ready: readiness.is_ok(),
        not_ready: readiness.err(),
        outposts,
        counts,
    })
    .into_response()
}

async fn sessions(State(state): State<Arc<AdminState>>) -> Response {
    let listed = state
        .serving
        .store
        .sessions()
        .and_then(|records| Ok((records, state.serving.store.newest_snapshot_bytes()?)));
    match listed {
        Ok((records, sizes)) => Json(
            records
                .iter()
                .map(|r| state.summary_with(r, sizes.get(&r.session_id).copied()))
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => internal(e),
    }
}

/// One page of the sessions: sizing and snapshots are looked up for its
/// rows alone, so the answer's cost follows the page, not the store.
async fn session_page(State(state): State<Arc<AdminState>>, RawQuery(raw): RawQuery) -> Response {
    let query = match SessionQuery::parse(raw.as_deref().unwrap_or_default()) {
        Ok(q) => q,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let records = match state.serving.store.sessions() {
        Ok(r) => r,
        Err(e) => return internal(e),
    };
    let selection = listing::select(&records, &query);
    Json(SessionPage {
        sessions: selection.rows.iter().map(|r| state.summary(r)).collect(),
        offset: query.offset as u64,
        limit: query.limit as u64,
        matched: selection.matched as u64,
        total: selection.total as u64,
        counts: selection.counts,
    })
    .into_response()
}

async fn session(State(state): State<Arc<AdminState>>, Path(id): Path<String>) -> Response {
    let rec = match checked(id).and_then(|id| state.record(&id)) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let events = match state.serving.store.events(&rec.session_id, 0) {
        Ok(e) => e,
        Err(e) => return internal(e),
    };
    let log_bytes = std::fs::metadata(state.remote_log(rec.session_id.as_str()))
        .map(|m| m.len())
        .unwrap_or(0);
    Json(SessionDetail {
        summary: state.summary(&rec),
        events,
        log_bytes,
    })
    .into_response()
}

#[derive(Deserialize)]
struct After {
    #[serde(default)]
    after: i64,
}

async fn events(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Query(q): Query<After>,
) -> Response {
    let id = match checked(id).and_then(|id| state.record(&id)) {
        Ok(rec) => rec.session_id,
        Err(e) => return e.into_response(),
    };
    match state.serving.store.events(&id, q.after) {
        Ok(events) => Json(events).into_response(),
        Err(e) => internal(e),
    }
}

#[derive(Deserialize)]
struct Offset {
    #[serde(default)]
    offset: u64,
}

/// Reads at most [`LOG_CHUNK`] bytes of `path` from `offset`, ending on a
/// UTF-8 boundary (an incomplete character at the end waits for the next
/// read; invalid bytes are replaced).
fn read_chunk(path: &std::path::Path, offset: u64) -> std::io::Result<LogChunk> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LogChunk {
                text: String::new(),
                next_offset: offset,
            });
        }
        Err(e) => return Err(e),
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    file.take(LOG_CHUNK).read_to_end(&mut buf)?;
    let mut used = buf.len();
    if let Err(e) = std::str::from_utf8(&buf)
        && e.error_len().is_none()
    {
        // Cut before a character split by the end of the read.
        used = e.valid_up_to();
    }
    Ok(LogChunk {
        text: String::from_utf8_lossy(&buf[..used]).into_owned(),
        next_offset: offset + used as u64,
    })
}

async fn log(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Query(q): Query<Offset>,
) -> Response {
    let id = match checked(id).and_then(|id| state.record(&id)) {
        Ok(rec) => rec.session_id,
        Err(e) => return e.into_response(),
    };
    match read_chunk(&state.remote_log(id.as_str()), q.offset) {
        Ok(chunk) => Json(chunk).into_response(),
        Err(e) => internal(e.into()),
    }
}

/// Where one `/stream` is.
struct Follow {
    state: Arc<AdminState>,
    id: SessionId,
    offset: u64,
    last_event: i64,
    stage: Option<String>,
    /// Queued SSE events to send before looking again.
    queue: std::collections::VecDeque<SseEvent>,
    done: bool,
    first: bool,
}

impl Follow {
    /// Looks once for new output, events and a stage change; `true` when
    /// the session is done and everything has been sent.
    fn poll(&mut self) -> bool {
        let path = self.state.remote_log(self.id.as_str());
        loop {
            match read_chunk(&path, self.offset) {
                Ok(chunk) if chunk.next_offset > self.offset => {
                    self.offset = chunk.next_offset;
                    self.queue
                        .push_back(SseEvent::default().event("log").data(chunk.text));
                }
                _ => break,
            }
        }
        let store = &self.state.serving.store;
        if let Ok(events) = store.events(&self.id, self.last_event) {
            for e in events {
                self.last_event = e.id;
                if let Ok(ev) = SseEvent::default().event("event").json_data(&e) {
                    self.queue.push_back(ev);
                }
            }
        }
        match store.session(&self.id) {
            Ok(Some(rec)) => {
                let label = rec.stage.label().as_str().to_owned();
                if self.stage.as_deref() != Some(label.as_str()) {
                    self.queue
                        .push_back(SseEvent::default().event("stage").data(&label));
                    self.stage = Some(label);
                }
                // Output is copied before the stage becomes done, so one
                // more look after it has caught everything.
                rec.stage.is_done()
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

async fn stream(State(state): State<Arc<AdminState>>, Path(id): Path<String>) -> Response {
    let id = match checked(id).and_then(|id| state.record(&id)) {
        Ok(rec) => rec.session_id,
        Err(e) => return e.into_response(),
    };
    let follow = Follow {
        state,
        id,
        offset: 0,
        last_event: 0,
        stage: None,
        queue: Default::default(),
        done: false,
        first: true,
    };
    Sse::new(follow_stream(follow))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn follow_stream(follow: Follow) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures::stream::unfold(follow, |mut f| async move {
        loop {
            if let Some(ev) = f.queue.pop_front() {
                return Some((Ok(ev), f));
            }
            if f.done {
                return None;
            }
            if !f.first {
                tokio::time::sleep(STREAM_POLL).await;
            }
            f.first = false;
            f.done = f.poll();
        }
    })
}

async fn terminate(
    State(state): State<Arc<AdminState>>,
    Path(id): Path<String>,
    Json(req): Json<TerminateRequest>,
) -> Response {
    // An id no server could send names no session here.
    let requested = SessionId::new(id)
        .map_err(|_| TerminateError::NotFound)
        .and_then(|id| {
            state
                .serving
                .request_terminate(&id, req.keep_snapshot)
                .map(|()| id)
        });
    match requested {
        Ok(id) => (
            StatusCode::ACCEPTED,
            Json(json!({ "session_id": id, "keep_snapshot": req.keep_snapshot })),
        )
            .into_response(),
        Err(e) => {
            let status = match e {
                TerminateError::NotFound => StatusCode::NOT_FOUND,
                TerminateError::NotActive => StatusCode::CONFLICT,
            };
            error(status, e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_chunks_end_on_character_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("remote.log");
        assert_eq!(read_chunk(&path, 0).unwrap().next_offset, 0);
        // "é" is two bytes; write only its first.
        std::fs::write(&path, b"ab\xc3").unwrap();
        let c = read_chunk(&path, 0).unwrap();
        assert_eq!((c.text.as_str(), c.next_offset), ("ab", 2));
        std::fs::write(&path, "abé\n").unwrap();
        let c = read_chunk(&path, 2).unwrap();
        assert_eq!((c.text.as_str(), c.next_offset), ("é\n", 5));
        let c = read_chunk(&path, 5).unwrap();
        assert_eq!((c.text.as_str(), c.next_offset), ("", 5));
    }
}
