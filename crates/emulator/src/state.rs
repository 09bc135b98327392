//! Everything the emulator knows, as plain data with its transitions: the
//! outposts, the queue rows, the sessions behind them, credentials and the
//! event log. No I/O and no clock: every transition takes `now` (Unix ms),
//! so the protocol's rules are unit-tested here directly.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fleet::{
    EntryMetadata, EntrySpec, EntryStatus, EventType, Outpost, OutpostMetadata, OutpostSpec,
    OutpostStatus, Phase, Platform, QueueEntry, Secret, SessionKind, SessionStatus, Timestamp,
};
use serde_json::{Value, json};

use crate::events::{CursorGone, EventLog, LoggedEvent};
use crate::model::{NewSession, Script, SessionView, TranscriptEvent};

/// Scope that reads the queue and claims/releases entries.
pub const SCOPE_MACHINE: &str = "account.outposts.machine";
/// Scope that also creates and deletes outposts.
pub const SCOPE_ORCHESTRATOR: &str = "account.outposts.orchestrator";

/// Longest id, name or acceptor id accepted from a caller.
pub(crate) const MAX_ID_LEN: usize = 256;

/// Durations the transitions need, in milliseconds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timing {
    pub claim_ttl_ms: i64,
    pub linger_ms: i64,
    pub status_lag_ms: i64,
    pub connect_token_ttl_ms: i64,
    pub code_ttl_ms: i64,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            claim_ttl_ms: 300_000,
            linger_ms: 30_000,
            status_lag_ms: 2_000,
            connect_token_ttl_ms: 86_400_000,
            code_ttl_ms: 600_000,
        }
    }
}

/// Why a transition was refused; the HTTP layers map these to status codes.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StateError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("cursor is no longer valid; list again")]
    Gone,
}

impl From<CursorGone> for StateError {
    fn from(_: CursorGone) -> Self {
        Self::Gone
    }
}

/// Why the gateway refuses a remote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GatewayRefusal {
    /// Missing or unknown connect token.
    Unauthorized,
    /// Expired token, token of another session, or the session is over.
    Forbidden,
    /// Another remote of the same session is connected.
    Duplicate,
}

/// Why an account token is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AuthError {
    Unauthorized,
    Forbidden,
}

/// Why a PKCE token exchange is refused, spelled as RFC 6749 error codes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GrantError {
    InvalidGrant,
}

/// How a session is being stopped; decided by the script's end or the admin
/// API, applied to `session_status` once the remote is gone (after the lag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Sleep,
    End,
}

impl Stop {
    pub fn final_status(self) -> SessionStatus {
        match self {
            Stop::Sleep => SessionStatus::Suspended,
            Stop::End => SessionStatus::Terminated,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct OutpostRec {
    pub id: String,
    pub name: String,
    pub platform: Platform,
    pub description: Option<String>,
    pub created_ms: i64,
}

/// A queue row. `row` orders the keyset paging; a resume entry gets a new one.
#[derive(Clone, Debug)]
pub(crate) struct EntryRec {
    pub session_id: String,
    pub outpost_id: String,
    pub row: u64,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub spec: EntrySpec,
    pub phase: Phase,
    pub acceptor_id: Option<String>,
    pub claim_deadline_ms: Option<i64>,
    /// When a pending row of a finished session is swept away.
    pub linger_until_ms: Option<i64>,
}

/// The Devin session behind a queue row, and the brain's progress in it.
#[derive(Clone, Debug)]
pub(crate) struct SessionRec {
    pub session_id: String,
    pub outpost_id: String,
    pub status: SessionStatus,
    pub script: Script,
    pub next_step: usize,
    /// Crashes already delivered for the current `Crash` step.
    pub crashes: u32,
    pub connections: u32,
    pub connected: Option<u64>,
    pub stopping: Option<Stop>,
    /// A status change waiting out the lag, and when it is due.
    pub status_due: Option<(SessionStatus, i64)>,
    pub transcript: Vec<TranscriptEvent>,
}

impl SessionRec {
    pub fn record(&mut self, now: i64, kind: &str, detail: Value) {
        self.transcript.push(TranscriptEvent {
            at_ms: now,
            kind: kind.to_owned(),
            detail,
        });
    }
}

#[derive(Clone, Debug)]
struct ConnectTokenRec {
    session_id: String,
    expires_ms: i64,
}

#[derive(Clone, Debug)]
struct CodeRec {
    challenge: String,
    outpost_id: String,
    expires_ms: i64,
}

/// A list page cursor or a watch (event log) cursor. Both are opaque strings
/// to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cursor {
    /// Next page starts at `row`; `snapshot` is the event log head when the
    /// first page was served, handed out as the final page's cursor so the
    /// watch replays whatever changed during paging.
    Page {
        row: u64,
        snapshot: u64,
    },
    Event(u64),
}

impl Cursor {
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(rest) = s.strip_prefix("page.") {
            let (row, snap) = rest.split_once('.')?;
            return Some(Cursor::Page {
                row: row.parse().ok()?,
                snapshot: snap.parse().ok()?,
            });
        }
        let n = s.strip_prefix("ev.").unwrap_or(s);
        n.parse().ok().map(Cursor::Event)
    }

    pub fn encode(&self) -> String {
        match self {
            Cursor::Page { row, snapshot } => format!("page.{row}.{snapshot}"),
            Cursor::Event(seq) => format!("ev.{seq}"),
        }
    }
}

/// A validated `GET /devins` (non-watch) request.
#[derive(Clone, Debug)]
pub(crate) struct ListQuery {
    pub outpost_id: String,
    pub phase: Option<String>,
    pub acceptor_id: Option<String>,
    pub first: usize,
    pub cursor: Option<Cursor>,
}

/// One page of `GET /devins`.
#[derive(Clone, Debug)]
pub(crate) struct Page {
    pub items: Vec<QueueEntry>,
    pub cursor: String,
    pub has_next_page: bool,
    pub total: u64,
}

/// The whole emulated control plane.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub timing: Timing,
    pub outposts: Vec<OutpostRec>,
    pub entries: BTreeMap<String, EntryRec>,
    pub sessions: BTreeMap<String, SessionRec>,
    pub log: EventLog,
    account_tokens: HashMap<String, BTreeSet<String>>,
    connect_tokens: HashMap<String, ConnectTokenRec>,
    codes: HashMap<String, CodeRec>,
    next_row: u64,
}

pub(crate) fn random_hex(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes * 2);
    while out.len() < bytes * 2 {
        out.push_str(&hex::encode(rand::random::<[u8; 16]>()));
    }
    out.truncate(bytes * 2);
    out
}

fn ts(ms: i64) -> Option<Timestamp> {
    Timestamp::from_unix_millis(ms)
}

pub(crate) fn check_id(what: &str, id: &str) -> Result<(), StateError> {
    if id.is_empty() || id.len() > MAX_ID_LEN || id.chars().any(char::is_control) {
        return Err(StateError::Invalid(format!("invalid {what}")));
    }
    Ok(())
}

impl State {
    pub fn new(timing: Timing) -> Self {
        Self {
            timing,
            ..Default::default()
        }
    }

    // ---- credentials -------------------------------------------------

    pub fn mint_account_token(&mut self, scopes: &[&str]) -> String {
        let token = format!("cog_{}", random_hex(24));
        self.account_tokens.insert(
            token.clone(),
            scopes.iter().map(|s| (*s).to_owned()).collect(),
        );
        token
    }

    /// Checks a bearer token for any one of `scopes`.
    pub fn check_account_token(&self, token: &str, scopes: &[&str]) -> Result<(), AuthError> {
        let granted = self
            .account_tokens
            .get(token)
            .ok_or(AuthError::Unauthorized)?;
        if scopes.iter().any(|s| granted.contains(*s)) {
            Ok(())
        } else {
            Err(AuthError::Forbidden)
        }
    }

    /// Mints a single-use authorization code bound to a PKCE challenge.
    pub fn mint_code(&mut self, challenge: &str, outpost_id: &str, now: i64) -> String {
        self.codes.retain(|_, c| c.expires_ms > now);
        let code = format!("code_{}", random_hex(16));
        self.codes.insert(
            code.clone(),
            CodeRec {
                challenge: challenge.to_owned(),
                outpost_id: outpost_id.to_owned(),
                expires_ms: now + self.timing.code_ttl_ms,
            },
        );
        code
    }

    /// Redeems a code once; `challenge_of_verifier` is the caller's
    /// `base64url_nopad(sha256(verifier))`. Any attempt uses the code up, as
    /// a guessed verifier must not get a second try.
    pub fn redeem_code(
        &mut self,
        code: &str,
        challenge_of_verifier: &str,
        now: i64,
    ) -> Result<(OutpostRec, String), GrantError> {
        let rec = self.codes.remove(code).ok_or(GrantError::InvalidGrant)?;
        if rec.expires_ms <= now || rec.challenge != challenge_of_verifier {
            return Err(GrantError::InvalidGrant);
        }
        let outpost = self
            .outpost_rec(&rec.outpost_id)
            .cloned()
            .ok_or(GrantError::InvalidGrant)?;
        let token = self.mint_account_token(&[SCOPE_MACHINE, SCOPE_ORCHESTRATOR]);
        Ok((outpost, token))
    }

    // ---- outposts ----------------------------------------------------

    pub fn create_outpost(
        &mut self,
        name: &str,
        platform: Platform,
        description: Option<String>,
        now: i64,
    ) -> String {
        let id = format!("outpost_env-{}", random_hex(12));
        self.outposts.push(OutpostRec {
            id: id.clone(),
            name: name.to_owned(),
            platform,
            description,
            created_ms: now,
        });
        id
    }

    pub fn outpost_rec(&self, id: &str) -> Option<&OutpostRec> {
        self.outposts.iter().find(|o| o.id == id)
    }

    pub fn outpost_by_name(&self, name: &str) -> Option<&OutpostRec> {
        self.outposts.iter().find(|o| o.name == name)
    }

    pub fn render_outpost(&self, rec: &OutpostRec) -> Outpost {
        let rows = self.entries.values().filter(|e| e.outpost_id == rec.id);
        let (mut pending, mut claimed) = (0, 0);
        for e in rows {
            match e.phase {
                Phase::Pending => pending += 1,
                Phase::Claimed => claimed += 1,
                Phase::Unknown(_) => {}
            }
        }
        Outpost {
            metadata: OutpostMetadata {
                outpost_id: rec.id.clone(),
                name: rec.name.clone(),
                created_at: ts(rec.created_ms),
            },
            spec: OutpostSpec {
                platform: rec.platform.clone(),
                description: rec.description.clone(),
            },
            status: OutpostStatus {
                queue_depth: pending,
                active_claims: claimed,
            },
        }
    }

    pub fn outpost(&self, id: &str) -> Option<Outpost> {
        self.outpost_rec(id).map(|r| self.render_outpost(r))
    }

    /// Outposts in creation order after the one with id `after`.
    pub fn list_outposts(
        &self,
        first: usize,
        after: Option<&str>,
    ) -> Result<(Vec<Outpost>, Option<String>, bool), StateError> {
        let start = match after {
            None => 0,
            Some(id) => {
                self.outposts
                    .iter()
                    .position(|o| o.id == id)
                    .ok_or_else(|| StateError::Invalid("unknown cursor".into()))?
                    + 1
            }
        };
        let rest = &self.outposts[start.min(self.outposts.len())..];
        let page: Vec<Outpost> = rest
            .iter()
            .take(first)
            .map(|r| self.render_outpost(r))
            .collect();
        let end = page.last().map(|o| o.metadata.outpost_id.clone());
        Ok((page, end, rest.len() > first))
    }

    /// Deletes an outpost and its queue rows (each with a DELETED event).
    pub fn delete_outpost(&mut self, id: &str, now: i64) -> Result<(), StateError> {
        let pos = self
            .outposts
            .iter()
            .position(|o| o.id == id)
            .ok_or_else(|| StateError::NotFound("outpost".into()))?;
        self.outposts.remove(pos);
        let rows: Vec<String> = self
            .entries
            .values()
            .filter(|e| e.outpost_id == id)
            .map(|e| e.session_id.clone())
            .collect();
        for session_id in rows {
            self.remove_entry(&session_id, now);
        }
        Ok(())
    }

    // ---- rows and events ----------------------------------------------

    /// The row as the API shows it (without claim-only fields).
    pub fn render(&self, session_id: &str) -> Option<QueueEntry> {
        let e = self.entries.get(session_id)?;
        let status = self
            .sessions
            .get(session_id)
            .map(|s| s.status.clone())
            .unwrap_or_default();
        Some(QueueEntry {
            metadata: EntryMetadata {
                session_id: e.session_id.clone(),
                outpost_id: e.outpost_id.clone(),
                created_at: ts(e.created_ms),
                updated_at: ts(e.updated_ms),
            },
            spec: e.spec.clone(),
            status: EntryStatus {
                phase: e.phase.clone(),
                acceptor_id: e.acceptor_id.clone(),
                claim_deadline: e.claim_deadline_ms.and_then(ts),
                session_status: status,
                connect_token: None,
                gateway_url: None,
            },
        })
    }

    fn emit_modified(&mut self, session_id: &str) {
        if let Some(obj) = self.render(session_id) {
            let outpost = obj.metadata.outpost_id.clone();
            self.log.push(&outpost, EventType::Modified, obj);
        }
    }

    fn touch(&mut self, session_id: &str, now: i64) {
        if let Some(e) = self.entries.get_mut(session_id) {
            e.updated_ms = now;
        }
    }

    fn record(&mut self, session_id: &str, now: i64, kind: &str, detail: Value) {
        if let Some(s) = self.sessions.get_mut(session_id) {
            s.record(now, kind, detail);
        }
    }

    /// Drops a queue row with a DELETED event. The session itself remains.
    pub fn remove_entry(&mut self, session_id: &str, now: i64) -> bool {
        let Some(obj) = self.render(session_id) else {
            return false;
        };
        self.entries.remove(session_id);
        let outpost_id = obj.metadata.outpost_id.clone();
        self.log.push(&outpost_id, EventType::Deleted, obj);
        self.record(session_id, now, "entry_removed", json!({}));
        true
    }

    fn enqueue(&mut self, session_id: &str, outpost_id: &str, spec: EntrySpec, now: i64) {
        self.next_row += 1;
        self.entries.insert(
            session_id.to_owned(),
            EntryRec {
                session_id: session_id.to_owned(),
                outpost_id: outpost_id.to_owned(),
                row: self.next_row,
                created_ms: now,
                updated_ms: now,
                spec,
                phase: Phase::Pending,
                acceptor_id: None,
                claim_deadline_ms: None,
                linger_until_ms: None,
            },
        );
        self.emit_modified(session_id);
    }

    // ---- sessions ------------------------------------------------------

    pub fn create_session(&mut self, req: NewSession, now: i64) -> Result<String, StateError> {
        let outpost = self
            .outpost_rec(&req.outpost_id)
            .cloned()
            .ok_or_else(|| StateError::NotFound("outpost".into()))?;
        let session_id = match req.session_id {
            Some(id) => {
                fleet::validate_session_id(&id).map_err(|e| StateError::Invalid(e.to_string()))?;
                id
            }
            None => format!("devin-{}", random_hex(16)),
        };
        if self.sessions.contains_key(&session_id) {
            return Err(StateError::Conflict("session already exists".into()));
        }
        let spec = EntrySpec {
            kind: req.kind.unwrap_or(SessionKind::New),
            platform: req.platform.unwrap_or(outpost.platform),
            remote_binary_sha: req.remote_binary_sha,
            network_policy: req.network_policy.unwrap_or_default(),
        };
        let mut session = SessionRec {
            session_id: session_id.clone(),
            outpost_id: outpost.id.clone(),
            status: SessionStatus::Pending,
            script: req.script,
            next_step: 0,
            crashes: 0,
            connections: 0,
            connected: None,
            stopping: None,
            status_due: None,
            transcript: Vec::new(),
        };
        session.record(now, "enqueued", json!({"kind": spec.kind.as_str()}));
        self.sessions.insert(session_id.clone(), session);
        self.enqueue(&session_id, &outpost.id, spec, now);
        Ok(session_id)
    }

    pub fn view(&self, session_id: &str) -> Option<SessionView> {
        let s = self.sessions.get(session_id)?;
        Some(SessionView {
            session_id: s.session_id.clone(),
            outpost_id: s.outpost_id.clone(),
            entry: self.render(session_id),
            session_status: s.status.clone(),
            connections: s.connections,
            connected: s.connected.is_some(),
            steps_done: s.next_step,
            transcript: s.transcript.clone(),
        })
    }

    fn session_mut(&mut self, session_id: &str) -> Result<&mut SessionRec, StateError> {
        self.sessions
            .get_mut(session_id)
            .ok_or_else(|| StateError::NotFound("session".into()))
    }

    /// Asks the session to stop. With a remote connected the brain tells it
    /// and the status follows its exit; without one the status just follows
    /// after the lag. Returns whether a connected brain must be woken.
    pub fn request_stop(
        &mut self,
        session_id: &str,
        stop: Stop,
        now: i64,
    ) -> Result<bool, StateError> {
        let lag = self.timing.status_lag_ms;
        let s = self.session_mut(session_id)?;
        if s.status == SessionStatus::Terminated {
            if stop == Stop::End {
                return Ok(false);
            }
            return Err(StateError::Conflict("session is terminated".into()));
        }
        if stop == Stop::Sleep && s.status == SessionStatus::Suspended {
            return Ok(false);
        }
        s.stopping = Some(stop);
        s.record(
            now,
            "stop_requested",
            json!({"stop": format!("{stop:?}").to_lowercase()}),
        );
        if s.connected.is_some() {
            return Ok(true);
        }
        s.status_due = Some((stop.final_status(), now + lag));
        Ok(false)
    }

    /// Queues a suspended session again as a `resume` entry with a new script.
    pub fn resume(&mut self, session_id: &str, script: Script, now: i64) -> Result<(), StateError> {
        let s = self.session_mut(session_id)?;
        if s.status != SessionStatus::Suspended {
            return Err(StateError::Conflict(format!(
                "session is {}, not suspended",
                s.status
            )));
        }
        s.status = SessionStatus::Pending;
        s.script = script;
        s.next_step = 0;
        s.crashes = 0;
        s.stopping = None;
        s.status_due = None;
        s.record(now, "resumed", json!({}));
        let outpost_id = s.outpost_id.clone();
        let mut spec = self
            .entries
            .get(session_id)
            .map(|e| e.spec.clone())
            .unwrap_or_default();
        if !self.entries.contains_key(session_id) {
            let platform = self
                .outpost_rec(&outpost_id)
                .map(|o| o.platform.clone())
                .unwrap_or_default();
            spec.platform = platform;
        }
        spec.kind = SessionKind::Resume;
        self.enqueue(session_id, &outpost_id, spec, now);
        Ok(())
    }

    // ---- time ----------------------------------------------------------

    /// Lazy claim expiry, run on fleet API calls: an expired claim returns
    /// to the queue unless its session is running, because a live session
    /// stays with its worker.
    pub fn expire_claims(&mut self, now: i64) {
        let expired: Vec<String> = self
            .entries
            .values()
            .filter(|e| e.phase == Phase::Claimed && e.claim_deadline_ms.is_some_and(|d| d <= now))
            .filter(|e| {
                self.sessions
                    .get(&e.session_id)
                    .is_none_or(|s| s.status != SessionStatus::Running)
            })
            .map(|e| e.session_id.clone())
            .collect();
        for id in expired {
            let e = self.entries.get_mut(&id).expect("listed above");
            let acceptor = e.acceptor_id.take();
            e.phase = Phase::Pending;
            e.claim_deadline_ms = None;
            e.updated_ms = now;
            self.record(&id, now, "claim_expired", json!({"acceptor_id": acceptor}));
            self.emit_modified(&id);
        }
    }

    /// The server's own clock work: lagged status changes, and the sweeper
    /// that removes lingering pending rows of finished sessions.
    pub fn tick(&mut self, now: i64) {
        let due: Vec<(String, SessionStatus)> = self
            .sessions
            .values()
            .filter_map(|s| match &s.status_due {
                Some((status, at)) if *at <= now => Some((s.session_id.clone(), status.clone())),
                _ => None,
            })
            .collect();
        for (id, status) in due {
            let s = self.sessions.get_mut(&id).expect("listed above");
            s.status_due = None;
            self.set_status(&id, status, now);
        }
        let linger = self.timing.linger_ms;
        let mut sweep = Vec::new();
        for e in self.entries.values_mut() {
            let finished = self
                .sessions
                .get(&e.session_id)
                .is_some_and(|s| s.status.is_final());
            if e.phase != Phase::Pending || !finished {
                e.linger_until_ms = None;
                continue;
            }
            match e.linger_until_ms {
                None => e.linger_until_ms = Some(now + linger),
                Some(t) if t <= now => sweep.push(e.session_id.clone()),
                Some(_) => {}
            }
        }
        for id in sweep {
            self.remove_entry(&id, now);
        }
    }

    pub fn set_status(&mut self, session_id: &str, status: SessionStatus, now: i64) {
        let Some(s) = self.sessions.get_mut(session_id) else {
            return;
        };
        if s.status == status {
            return;
        }
        let from = std::mem::replace(&mut s.status, status.clone());
        s.record(
            now,
            "status",
            json!({"from": from.as_str(), "to": status.as_str()}),
        );
        self.touch(session_id, now);
        self.emit_modified(session_id);
    }

    // ---- fleet API ------------------------------------------------------

    /// Keyset paging in row order. The next page starts AT the previous
    /// page's last item, so the boundary item repeats (at-least-once, as the
    /// real service); with `first == 1` it starts after it, or paging could
    /// never advance.
    pub fn list(&self, q: &ListQuery) -> Result<Page, StateError> {
        if self.outpost_rec(&q.outpost_id).is_none() {
            return Err(StateError::NotFound("outpost".into()));
        }
        let (start, snapshot) = match q.cursor {
            None => (0, self.log.head()),
            Some(Cursor::Page { row, snapshot }) => {
                let start = if q.first == 1 { row + 1 } else { row };
                (start, snapshot)
            }
            Some(Cursor::Event(_)) => {
                return Err(StateError::Invalid(
                    "an event cursor is for watch=true".into(),
                ));
            }
        };
        let mut rows: Vec<&EntryRec> = self
            .entries
            .values()
            .filter(|e| e.outpost_id == q.outpost_id)
            .filter(|e| q.phase.as_deref().is_none_or(|p| e.phase.as_str() == p))
            .filter(|e| {
                q.acceptor_id
                    .as_deref()
                    .is_none_or(|a| e.acceptor_id.as_deref() == Some(a))
            })
            .collect();
        rows.sort_by_key(|e| e.row);
        let total = rows.len() as u64;
        let rest: Vec<&EntryRec> = rows.into_iter().filter(|e| e.row >= start).collect();
        let page: Vec<&EntryRec> = rest.iter().take(q.first).copied().collect();
        let has_next_page = rest.len() > page.len();
        let cursor = match (has_next_page, page.last()) {
            (true, Some(last)) => Cursor::Page {
                row: last.row,
                snapshot,
            },
            _ => Cursor::Event(snapshot),
        };
        Ok(Page {
            items: page
                .iter()
                .filter_map(|e| self.render(&e.session_id))
                .collect(),
            cursor: cursor.encode(),
            has_next_page,
            total,
        })
    }

    pub fn events_after(
        &self,
        outpost_id: &str,
        after: u64,
        max: usize,
    ) -> Result<(Vec<LoggedEvent>, u64), StateError> {
        Ok(self.log.after(outpost_id, after, max)?)
    }

    /// The claim compare-and-swap. Returns the entry and a fresh connect
    /// token on success.
    pub fn claim(
        &mut self,
        session_id: &str,
        acceptor_id: &str,
        now: i64,
    ) -> Result<(QueueEntry, String), StateError> {
        check_id("acceptor_id", acceptor_id)?;
        let running = self
            .sessions
            .get(session_id)
            .is_some_and(|s| s.status == SessionStatus::Running);
        let e = self
            .entries
            .get_mut(session_id)
            .ok_or_else(|| StateError::NotFound("entry".into()))?;
        let renewal = e.phase == Phase::Claimed && e.acceptor_id.as_deref() == Some(acceptor_id);
        let expired = e.claim_deadline_ms.is_none_or(|d| d <= now);
        let free = e.phase != Phase::Claimed || (expired && !running);
        if !renewal && !free {
            return Err(StateError::Conflict("claimed by another acceptor".into()));
        }
        e.phase = Phase::Claimed;
        e.acceptor_id = Some(acceptor_id.to_owned());
        e.claim_deadline_ms = Some(now + self.timing.claim_ttl_ms);
        e.updated_ms = now;
        e.linger_until_ms = None;
        let token = format!("ct_{}", random_hex(24));
        self.connect_tokens.insert(
            token.clone(),
            ConnectTokenRec {
                session_id: session_id.to_owned(),
                expires_ms: now + self.timing.connect_token_ttl_ms,
            },
        );
        let kind = if renewal { "renewed" } else { "claimed" };
        self.record(session_id, now, kind, json!({"acceptor_id": acceptor_id}));
        self.emit_modified(session_id);
        let mut entry = self.render(session_id).expect("row exists");
        entry.status.connect_token = Some(Secret::new(token.clone()));
        Ok((entry, token))
    }

    pub fn release(
        &mut self,
        session_id: &str,
        acceptor_id: &str,
        now: i64,
    ) -> Result<QueueEntry, StateError> {
        check_id("acceptor_id", acceptor_id)?;
        let finished = self
            .sessions
            .get(session_id)
            .is_some_and(|s| s.status.is_final());
        let linger = self.timing.linger_ms;
        let e = self
            .entries
            .get_mut(session_id)
            .ok_or_else(|| StateError::NotFound("entry".into()))?;
        if e.phase != Phase::Claimed || e.acceptor_id.as_deref() != Some(acceptor_id) {
            return Err(StateError::Conflict("not the holder of the claim".into()));
        }
        e.phase = Phase::Pending;
        e.acceptor_id = None;
        e.claim_deadline_ms = None;
        e.updated_ms = now;
        if finished {
            e.linger_until_ms = Some(now + linger);
        }
        self.record(
            session_id,
            now,
            "released",
            json!({"acceptor_id": acceptor_id}),
        );
        self.emit_modified(session_id);
        Ok(self.render(session_id).expect("row exists"))
    }

    // ---- gateway ---------------------------------------------------------

    /// Admits a remote: checks its connect token and that no other remote of
    /// the session is connected, then marks the session running.
    pub fn gateway_open(
        &mut self,
        token: Option<&str>,
        session_id: Option<&str>,
        conn: u64,
        now: i64,
    ) -> Result<(), GatewayRefusal> {
        let rec = token
            .and_then(|t| self.connect_tokens.get(t))
            .ok_or(GatewayRefusal::Unauthorized)?;
        let session_id = session_id.ok_or(GatewayRefusal::Forbidden)?;
        if rec.session_id != session_id || rec.expires_ms <= now {
            return Err(GatewayRefusal::Forbidden);
        }
        let s = self
            .sessions
            .get_mut(session_id)
            .ok_or(GatewayRefusal::Forbidden)?;
        if s.status == SessionStatus::Terminated {
            return Err(GatewayRefusal::Forbidden);
        }
        if let Some(other) = s.connected {
            s.record(now, "duplicate_connection", json!({"connected": other}));
            return Err(GatewayRefusal::Duplicate);
        }
        s.connected = Some(conn);
        s.connections += 1;
        let n = s.connections;
        s.record(now, "connected", json!({"connection": n}));
        let starting = !s.status.is_final() && s.status != SessionStatus::Running;
        if starting {
            self.set_status(session_id, SessionStatus::Running, now);
        }
        Ok(())
    }

    /// A remote's socket closed. If the session was being stopped, its
    /// status follows after the lag.
    pub fn gateway_closed(&mut self, session_id: &str, conn: u64, reason: &str, now: i64) {
        let lag = self.timing.status_lag_ms;
        let Some(s) = self.sessions.get_mut(session_id) else {
            return;
        };
        if s.connected != Some(conn) {
            return;
        }
        s.connected = None;
        s.record(now, "disconnected", json!({"reason": reason}));
        let pending = s
            .stopping
            .filter(|stop| s.status != stop.final_status() && s.status_due.is_none());
        if let Some(stop) = pending {
            s.status_due = Some((stop.final_status(), now + lag));
        }
    }

    pub fn record_event(&mut self, session_id: &str, kind: &str, detail: Value, now: i64) {
        self.record(session_id, now, kind, detail);
    }
}

#[cfg(test)]
mod tests;
