//! A client of the admin JSON API ([`orchestrator::api`]) of a running
//! `garrison serve`, for the commands that watch or steer it (`status`,
//! `sessions`, `logs`, `terminate`).

use std::time::Duration;

use anyhow::{Context, bail};
use common::Secret;
use orchestrator::MAX_LIMIT;
use orchestrator::api::{LogChunk, SessionDetail, SessionPage, SessionSummary, StatusView};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::DeserializeOwned;

pub(crate) const DEFAULT_ADMIN_URL: &str = "http://127.0.0.1:9180";

/// Characters left as they are in a path segment: RFC 3986 unreserved.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A session id (an untrusted string) as one URL path segment.
pub(crate) fn segment(session_id: &str) -> String {
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
pub(crate) enum AdminError {
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
pub(crate) struct Admin {
    base: String,
    http: reqwest::Client,
    /// The daemon's admin token, when this user can read it: sent with
    /// every request (terminating always needs it; a daemon listening
    /// beyond loopback needs it for everything).
    token: Option<Secret>,
}

impl Admin {
    pub(crate) fn new(base: &str, token: Option<Secret>) -> anyhow::Result<Self> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--admin must be an http:// or https:// URL, not {base:?}");
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .context("building the HTTP client")?;
        Ok(Self { base, http, token })
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token.expose()),
            None => request,
        }
    }

    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn session_path(session_id: &str, rest: &str) -> String {
        format!("/api/sessions/{}{rest}", segment(session_id))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, AdminError> {
        let response = self
            .authorized(self.http.get(self.url(path)))
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

    pub(crate) async fn status(&self) -> Result<StatusView, AdminError> {
        self.get("/api/status").await
    }

    /// Every session, newest claim first, fetched a bounded page at a
    /// time. A daemon older than paging (no `/api/session-page`) is asked
    /// for its whole list instead.
    pub(crate) async fn sessions(&self) -> Result<Vec<SessionSummary>, AdminError> {
        let mut pages = Pages::default();
        while let Some(path) = pages.next_path() {
            match self.get::<SessionPage>(&path).await {
                Ok(page) => pages.add(page),
                Err(AdminError::Status(404, _)) if pages.is_first() => {
                    return self.get("/api/sessions").await;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(pages.rows)
    }

    /// `Ok(None)` for an unknown session.
    pub(crate) async fn session(
        &self,
        session_id: &str,
    ) -> Result<Option<SessionDetail>, AdminError> {
        match self.get(&Self::session_path(session_id, "")).await {
            Ok(detail) => Ok(Some(detail)),
            Err(AdminError::Status(404, _)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn log(&self, session_id: &str, offset: u64) -> Result<LogChunk, AdminError> {
        self.get(&Self::session_path(
            session_id,
            &format!("/log?offset={offset}"),
        ))
        .await
    }

    /// `POST .../terminate`: the status code and the body's message.
    pub(crate) async fn terminate(
        &self,
        session_id: &str,
        keep_snapshot: bool,
    ) -> Result<(u16, String), AdminError> {
        let response = self
            .authorized(
                self.http
                    .post(self.url(&Self::session_path(session_id, "/terminate"))),
            )
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
    pub(crate) async fn stream(&self, session_id: &str) -> Result<reqwest::Response, AdminError> {
        let response = self
            .authorized(
                self.http
                    .get(self.url(&Self::session_path(session_id, "/stream"))),
            )
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

/// Paging through `/api/session-page`. Sessions claimed meanwhile push
/// rows onto later pages (records are never deleted, so none is skipped):
/// a row seen twice is kept once.
#[derive(Default)]
struct Pages {
    rows: Vec<SessionSummary>,
    seen: std::collections::HashSet<String>,
    offset: u64,
    done: bool,
    fetched: usize,
}

impl Pages {
    fn next_path(&self) -> Option<String> {
        (!self.done).then(|| format!("/api/session-page?limit={MAX_LIMIT}&offset={}", self.offset))
    }

    fn is_first(&self) -> bool {
        self.fetched == 0
    }

    fn add(&mut self, page: SessionPage) {
        self.fetched += 1;
        let got = page.sessions.len() as u64;
        self.offset += got;
        self.done = got == 0 || self.offset >= page.matched;
        for row in page.sessions {
            if self.seen.insert(row.session_id.clone()) {
                self.rows.push(row);
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn page(ids: &[&str], offset: u64, matched: u64) -> SessionPage {
        SessionPage {
            sessions: ids
                .iter()
                .map(|id| SessionSummary {
                    session_id: (*id).into(),
                    outpost_id: "o".into(),
                    kind: "new".into(),
                    backend: "host".into(),
                    stage: "running".into(),
                    claimed_at_ms: 0,
                    running_at_ms: None,
                    updated_at_ms: 0,
                    restarts: 0,
                    cpus: None,
                    memory_mb: None,
                    disk_mb: None,
                    snapshot_bytes: None,
                    error: None,
                })
                .collect(),
            offset,
            limit: 2,
            matched,
            total: matched,
            counts: Default::default(),
        }
    }

    #[test]
    fn pages_are_followed_to_the_end_and_repeated_rows_kept_once() {
        let mut pages = Pages::default();
        assert!(pages.is_first());
        assert_eq!(
            pages.next_path().unwrap(),
            format!("/api/session-page?limit={MAX_LIMIT}&offset=0")
        );
        pages.add(page(&["c", "b"], 0, 3));
        assert!(!pages.is_first());
        // A new session "d" was claimed: "b" moved onto the second page.
        assert!(pages.next_path().unwrap().ends_with("&offset=2"));
        pages.add(page(&["b", "a"], 2, 4));
        assert_eq!(pages.next_path(), None);
        let ids: Vec<&str> = pages.rows.iter().map(|r| r.session_id.as_str()).collect();
        assert_eq!(ids, ["c", "b", "a"]);
    }

    #[test]
    fn an_empty_page_ends_the_paging() {
        let mut pages = Pages::default();
        pages.add(page(&[], 0, 0));
        assert_eq!(pages.next_path(), None);
        assert!(pages.rows.is_empty());
    }

    #[test]
    fn session_ids_are_one_encoded_path_segment() {
        assert_eq!(segment("devin-abc_1.2~x"), "devin-abc_1.2~x");
        assert_eq!(segment("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("."), "%2E");
        assert_eq!(segment("é %"), "%C3%A9%20%25");
    }
}
