//! The commands that watch a running `garrison serve`: `status`,
//! `sessions`, `logs` and `terminate`.
//!
//! Each reads the admin JSON API ([`orchestrator::api`]) of the daemon and,
//! when the daemon is not reachable, falls back to the state store and the
//! session logs in the state directory (saying so in one dim line on
//! stderr). `terminate` has no fallback: only the daemon holding the claim
//! can stop a session.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use orchestrator::api::{LogChunk, SessionDetail, SessionSummary, StatusView};
use orchestrator::planner::Millis;
use orchestrator::settings::HostEnv;
use orchestrator::store::Store;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::DeserializeOwned;

pub const DEFAULT_ADMIN_URL: &str = "http://127.0.0.1:9180";

/// Where to read from: the daemon's admin API, else the state directory.
#[derive(Args, Clone, Debug)]
pub struct SourceArgs {
    /// The admin listener of a running `garrison serve`.
    #[arg(long, env = "GARRISON_ADMIN_URL", value_name = "URL", default_value = DEFAULT_ADMIN_URL)]
    pub admin: String,

    /// State directory to read when the daemon is not reachable [default:
    /// /var/lib/garrison as root, else ~/.local/share/garrison]
    #[arg(long, env = "GARRISON_HOME", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl SourceArgs {
    pub fn admin_client(&self) -> anyhow::Result<Admin> {
        Admin::new(&self.admin)
    }

    /// The state directory: the flag or `GARRISON_HOME`, else the
    /// configuration file's `state_dir`, else the default.
    pub fn state_dir(&self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.state_dir {
            return Ok(dir.clone());
        }
        let host = HostEnv::current();
        if let Ok(path) = host.config_file_path()
            && let Ok(Some(file)) = orchestrator::settings::load_file(&path)
            && let Some(dir) = file.state_dir
        {
            return Ok(dir.value);
        }
        Ok(host.default_state_dir()?)
    }

    /// Opens the state directory's store without creating anything.
    pub fn local(&self) -> anyhow::Result<Local> {
        Local::open(&self.state_dir()?)
    }
}

/// Characters left as they are in a path segment: RFC 3986 unreserved.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A session id (an untrusted string) as one URL path segment.
pub fn segment(session_id: &str) -> String {
    let encoded = utf8_percent_encode(session_id, SEGMENT).to_string();
    // "." and ".." would be resolved away by URL normalisation.
    match encoded.as_str() {
        "." => "%2E".to_owned(),
        ".." => "%2E%2E".to_owned(),
        _ => encoded,
    }
}

/// Why the admin API gave no answer.
#[derive(Debug)]
pub enum AdminError {
    /// Nothing answered (connection refused, timeout, not an HTTP server).
    Unreachable(String),
    /// The daemon answered with this status.
    Status(u16, String),
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreachable(why) => write!(f, "not reachable ({why})"),
            Self::Status(code, body) if body.is_empty() => write!(f, "HTTP {code}"),
            Self::Status(code, body) => write!(f, "HTTP {code}: {body}"),
        }
    }
}

impl std::error::Error for AdminError {}

/// A client of the admin JSON API.
#[derive(Clone)]
pub struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--admin must be an http:// or https:// URL, not {base:?}");
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .context("building the HTTP client")?;
        Ok(Self { base, http })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn session_path(session_id: &str, rest: &str) -> String {
        format!("/api/sessions/{}{rest}", segment(session_id))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, AdminError> {
        let response = self
            .http
            .get(self.url(path))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| AdminError::Unreachable(short_error(&e)))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(AdminError::Status(status.as_u16(), body_message(&body)));
        }
        response
            .json()
            .await
            .map_err(|e| AdminError::Unreachable(format!("unexpected answer: {e}")))
    }

    pub async fn status(&self) -> Result<StatusView, AdminError> {
        self.get("/api/status").await
    }

    pub async fn sessions(&self) -> Result<Vec<SessionSummary>, AdminError> {
        self.get("/api/sessions").await
    }

    /// `Ok(None)` for an unknown session.
    pub async fn session(&self, session_id: &str) -> Result<Option<SessionDetail>, AdminError> {
        match self.get(&Self::session_path(session_id, "")).await {
            Ok(detail) => Ok(Some(detail)),
            Err(AdminError::Status(404, _)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn log(&self, session_id: &str, offset: u64) -> Result<LogChunk, AdminError> {
        self.get(&Self::session_path(
            session_id,
            &format!("/log?offset={offset}"),
        ))
        .await
    }

    /// `POST .../terminate`: the status code and the body's message.
    pub async fn terminate(
        &self,
        session_id: &str,
        keep_snapshot: bool,
    ) -> Result<(u16, String), AdminError> {
        let response = self
            .http
            .post(self.url(&Self::session_path(session_id, "/terminate")))
            .json(&orchestrator::api::TerminateRequest { keep_snapshot })
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| AdminError::Unreachable(short_error(&e)))?;
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        Ok((status, body_message(&body)))
    }

    /// The session's live stream (`/stream`), for wake-ups while following.
    pub async fn stream(&self, session_id: &str) -> Result<reqwest::Response, AdminError> {
        let response = self
            .http
            .get(self.url(&Self::session_path(session_id, "/stream")))
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| AdminError::Unreachable(short_error(&e)))?;
        if !response.status().is_success() {
            return Err(AdminError::Status(
                response.status().as_u16(),
                String::new(),
            ));
        }
        Ok(response)
    }
}

/// The message of an error body (`{"error": ...}` or `{"message": ...}`),
/// else the body itself, shortened.
fn body_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(body) {
        for key in ["error", "message"] {
            if let Some(text) = value.get(key).and_then(|v| v.as_str()) {
                return text.to_owned();
            }
        }
    }
    let body = body.trim();
    body.chars().take(200).collect()
}

fn short_error(e: &reqwest::Error) -> String {
    if e.is_connect() {
        "connection failed".to_owned()
    } else if e.is_timeout() {
        "timed out".to_owned()
    } else {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(inner) = source {
            message = format!("{message}: {inner}");
            source = inner.source();
        }
        message
    }
}

/// The state directory of a (possibly stopped) daemon.
pub struct Local {
    pub state_dir: PathBuf,
    pub db_path: PathBuf,
    pub store: Store,
}

impl Local {
    pub fn open(state_dir: &Path) -> anyhow::Result<Self> {
        let db_path = orchestrator::serve::db_path(state_dir);
        if !db_path.exists() {
            bail!(
                "no state store at {} (has `garrison serve` run with this state directory? pass --state-dir or set GARRISON_HOME)",
                db_path.display()
            );
        }
        let store = Store::open_existing(&db_path)?;
        Ok(Self {
            state_dir: state_dir.to_owned(),
            db_path,
            store,
        })
    }

    /// The session's log directory: named by the hashed id, never the id.
    pub fn session_dir(&self, session_id: &str) -> PathBuf {
        self.state_dir
            .join("sessions")
            .join(sandbox::names::hashed_id(session_id))
    }

    pub fn remote_log(&self, session_id: &str) -> PathBuf {
        self.session_dir(session_id)
            .join(orchestrator::session_log::REMOTE_LOG)
    }

    /// A row as the admin API would give it (sizing is not recorded).
    pub fn summary(&self, rec: &orchestrator::store::SessionRecord) -> SessionSummary {
        let mut summary = SessionSummary::from_record(rec);
        summary.snapshot_bytes = self
            .store
            .snapshots(&rec.session_id)
            .ok()
            .and_then(|s| s.last().map(|s| s.snapshot.size_bytes));
        summary
    }

    pub fn sessions(&self) -> anyhow::Result<Vec<SessionSummary>> {
        Ok(self
            .store
            .sessions()?
            .iter()
            .map(|rec| self.summary(rec))
            .collect())
    }

    /// Reads `remote.log` from `offset`: the text and the next offset.
    pub fn log_from(&self, session_id: &str, offset: u64) -> anyhow::Result<LogChunk> {
        use std::io::{Read, Seek, SeekFrom};
        let path = self.remote_log(session_id);
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogChunk {
                    text: String::new(),
                    next_offset: offset,
                });
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.take(4 << 20).read_to_end(&mut bytes)?;
        // Stop at a character boundary; the rest comes next time.
        let valid = match std::str::from_utf8(&bytes) {
            Ok(_) => bytes.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => bytes.len(),
        };
        bytes.truncate(valid);
        Ok(LogChunk {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            next_offset: offset + valid as u64,
        })
    }

    pub fn log_len(&self, session_id: &str) -> u64 {
        std::fs::metadata(self.remote_log(session_id))
            .map(|m| m.len())
            .unwrap_or(0)
    }
}

/// Stderr is a terminal: dim notes there.
pub fn note(text: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("\x1b[2m{text}\x1b[0m");
    } else {
        eprintln!("{text}");
    }
}

/// The one line that says the daemon was not used.
pub fn fallback_note(admin: &Admin, why: &AdminError, local: &Local) {
    note(&format!(
        "daemon not reachable at {} ({why}); read from {}",
        admin.base(),
        local.db_path.display()
    ));
}

/// Whether to fall back to the state directory after this error.
pub fn should_fall_back(e: &AdminError) -> bool {
    match e {
        AdminError::Unreachable(_) => true,
        // Something else listens there, or a daemon without the JSON API.
        AdminError::Status(code, _) => matches!(code, 404 | 405 | 501 | 502 | 503),
    }
}

pub fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}

/// `45s`, `12m`, `3h05m`, `2d04h`.
pub fn age(ms: Millis) -> String {
    let s = (ms / 1000).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `512 B`, `1.5 KB`, `12 MB`, `3.2 GB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value < 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

/// Left-aligned columns separated by two spaces; no trailing spaces.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// A stage in which the session will not run here again unless Devin
/// queues it again: anything done except `suspended`.
pub fn is_final(stage: &str) -> bool {
    matches!(
        stage,
        "terminated" | "failed" | "released" | "vanished" | "stopped"
    )
}

/// Done stages (shown by `sessions --all`, counted as history).
pub fn is_done(stage: &str) -> bool {
    stage == "suspended" || is_final(stage)
}

/// Strips terminal control characters from server or remote text shown in
/// a table (ids are untrusted).
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_one_encoded_path_segment() {
        assert_eq!(segment("devin-abc_1.2~x"), "devin-abc_1.2~x");
        assert_eq!(segment("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("."), "%2E");
        assert_eq!(segment("é %"), "%C3%A9%20%25");
    }

    #[test]
    fn ages_and_sizes_read_short() {
        assert_eq!(age(-5), "0s");
        assert_eq!(age(59_999), "59s");
        assert_eq!(age(61_000), "1m");
        assert_eq!(age(3_900_000), "1h05m");
        assert_eq!(age(90_000_000), "1d01h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1_500), "1.5 KB");
        assert_eq!(bytes(12_000_000), "12 MB");
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["A", "BB"],
            &[vec!["xxx".into(), "y".into()], vec!["z".into(), "".into()]],
        );
        assert_eq!(t, "A    BB\nxxx  y\nz\n");
    }

    #[test]
    fn only_done_stages_but_suspended_are_final() {
        for s in ["claimed", "starting", "running", "finishing", "suspended"] {
            assert!(!is_final(s), "{s}");
        }
        for s in ["terminated", "failed", "released", "vanished", "stopped"] {
            assert!(is_final(s), "{s}");
        }
        assert!(is_done("suspended"));
        assert!(printable("a\x1b[2mb").starts_with("a?"));
    }
}
