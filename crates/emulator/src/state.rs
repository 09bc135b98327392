//! Everything the emulator knows, as plain data with its transitions: the
//! outposts, the queue rows, the sessions behind them, credentials and the
//! event log. No I/O and no clock: every transition takes `now` (Unix ms),
//! so the protocol's rules are unit-tested here directly.
//!
//! `State` is defined here with what every domain shares; each child module
//! adds the `impl State` block of one domain, so a protocol rule is read in
//! one place.

mod auth;
mod claims;
mod clock;
mod gateway;
mod listing;
mod outposts;
mod pkce;
mod queue;
mod sessions;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fleet::Timestamp;

pub(crate) use crate::events::Stamp;
use crate::events::{CursorGone, EventLog};

pub(crate) use auth::{ACCOUNT_ID, AuthError};
pub use auth::{SCOPE_MACHINE, SCOPE_ORCHESTRATOR};
use gateway::ConnectTokenRec;
pub(crate) use gateway::GatewayRefusal;
pub(crate) use listing::{Change, ListQuery};
use outposts::OutpostRec;
use pkce::CodeRec;
pub(crate) use pkce::{Approval, ApproveError, GrantError};
use queue::EntryRec;
pub(crate) use sessions::{SessionRec, Stop};

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
    /// Callback URLs the connect page relays codes to (normalised).
    callback_allowlist: BTreeSet<String>,
    /// Service users created by redeemed codes, with their outpost.
    pub service_users: BTreeMap<String, String>,
    next_row: u64,
    /// The newest `updated_at` handed out (Unix ms). Every change gets a
    /// later one, so `(updated_at, row)` orders changes like the service's
    /// database clock and a watcher's dedup by `(session, updated_at)`
    /// never hides a second change within one millisecond.
    last_stamp_ms: i64,
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
    pub(crate) fn new(timing: Timing) -> Self {
        Self {
            timing,
            ..Default::default()
        }
    }
}
