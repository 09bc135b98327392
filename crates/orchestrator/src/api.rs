//! The admin JSON API's types, shared by the listener in `garrison serve`
//! and the commands that read it (`garrison status`, `sessions`, `logs`,
//! `terminate`), which fall back to reading the state store directly when
//! the daemon is down.
//!
//! Routes (all on the admin listener, loopback by default):
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /api/status` | [`StatusView`] |
//! | `GET /api/sessions` | `Vec<`[`SessionSummary`]`>`, newest claim first (every session) |
//! | `GET /api/session-page?offset=&limit=&stage=&status=&q=` | [`SessionPage`]: one page of that list, filtered (parameters in `admin::listing`; 400 for a bad one) |
//! | `GET /api/sessions/{id}` | [`SessionDetail`] (404 unknown) |
//! | `GET /api/sessions/{id}/events?after=N` | `Vec<`[`crate::store::Event`]`>` |
//! | `GET /api/sessions/{id}/log?offset=N` | [`LogChunk`] of `remote.log` |
//! | `GET /api/sessions/{id}/stream` | SSE: `event: log` (data: text), `event: event` (data: Event JSON), `event: stage` (data: stage label) |
//! | `POST /api/sessions/{id}/terminate` | body [`TerminateRequest`]; 202, 404 unknown, 409 not active |
//!
//! Session ids in paths are percent-encoded.

use serde::{Deserialize, Serialize};

use crate::planner::Millis;
use fleet::SessionKind;

use crate::store::SessionRecord;

/// The orchestrator's health and what it serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    /// Who this Garrison is to the fleet API.
    pub acceptor_id: String,
    /// Garrison's version.
    pub version: String,
    /// When serving started.
    pub started_at_ms: Millis,
    /// Fleet API reachable and every queue view fresh.
    pub ready: bool,
    /// Why not ready (as `/readyz` says it); absent when ready, and from
    /// daemons older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    /// Each outpost served.
    pub outposts: Vec<OutpostView>,
    /// Sessions by [`StageLabel`](crate::planner::StageLabel) (its text).
    pub counts: std::collections::BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// One outpost, as `status` shows it.
pub struct OutpostView {
    /// The outpost.
    pub outpost_id: String,
    /// Its backend.
    pub backend: String,
    /// The most sessions it holds at once.
    pub max_concurrent: usize,
    /// When the queue view was last confirmed by the server (0: never).
    pub queue_synced_at_ms: Millis,
    /// Watch reconnections.
    pub watch_reconnects: u64,
    /// Pending entries of the served platform in the queue view.
    pub pending: u64,
    /// Sessions this Garrison holds now.
    pub held: u64,
}

/// One row of `garrison sessions` and the dashboard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session.
    pub session_id: String,
    /// Its outpost.
    pub outpost_id: String,
    /// New or resume.
    pub kind: SessionKind,
    /// The backend it runs on.
    pub backend: String,
    /// The stage's [`StageLabel`](crate::planner::StageLabel) (its text; [`StageLabel::parse`](crate::planner::StageLabel::parse) reads
    /// it back).
    pub stage: String,
    /// When it was claimed.
    pub claimed_at_ms: Millis,
    /// When its remote first ran.
    pub running_at_ms: Option<Millis>,
    /// When its record last changed.
    pub updated_at_ms: Millis,
    /// Restarts of its remote.
    pub restarts: u32,
    /// CPUs of its sandbox.
    pub cpus: Option<f64>,
    /// Memory of its sandbox.
    pub memory_mb: Option<u64>,
    /// Disk of its sandbox.
    pub disk_mb: Option<u64>,
    /// Size of the newest snapshot, if any.
    pub snapshot_bytes: Option<u64>,
    /// The last error, if any.
    pub error: Option<String>,
}

impl SessionSummary {
    /// A row from the state store; sizing and snapshot come from the caller,
    /// which knows the outpost's configuration and the snapshots table.
    pub fn from_record(rec: &SessionRecord) -> Self {
        Self {
            session_id: rec.session_id.as_str().to_owned(),
            outpost_id: rec.outpost_id.clone(),
            kind: rec.kind.clone(),
            backend: rec.backend.clone(),
            stage: rec.stage.label().as_str().to_owned(),
            claimed_at_ms: rec.claimed_at,
            running_at_ms: rec.running_at,
            updated_at_ms: rec.updated_at,
            restarts: rec.restarts,
            cpus: None,
            memory_mb: None,
            disk_mb: None,
            snapshot_bytes: None,
            error: rec.error.clone(),
        }
    }
}

/// One page of the sessions, newest claim first, with the counts a page
/// shows without fetching every row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionPage {
    /// The sessions of this page.
    pub sessions: Vec<SessionSummary>,
    /// Rows skipped before this page (of the matching ones).
    pub offset: u64,
    /// The most rows a page of this request holds.
    pub limit: u64,
    /// Sessions that match the filter, on every page.
    pub matched: u64,
    /// Every recorded session, filter or not.
    pub total: u64,
    /// Every recorded session by [`StageLabel`](crate::planner::StageLabel)
    /// (its text), filter or not.
    pub counts: std::collections::BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// One session with its history.
pub struct SessionDetail {
    #[serde(flatten)]
    /// The session.
    pub summary: SessionSummary,
    /// Its events, oldest first.
    pub events: Vec<crate::store::Event>,
    /// Bytes in `remote.log` so far.
    pub log_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
/// A piece of a session's log.
pub struct LogChunk {
    /// The text.
    pub text: String,
    /// Where the next piece starts.
    pub next_offset: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
/// What `terminate` asks.
pub struct TerminateRequest {
    /// Keep the workspace snapshot (taken before the sandbox is destroyed)
    /// instead of dropping every snapshot of the session.
    #[serde(default)]
    pub keep_snapshot: bool,
}
