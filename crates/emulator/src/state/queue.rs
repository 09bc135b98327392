//! The queue rows: adding one, rendering it as the API shows it, and the
//! MODIFIED and DELETED events every change of a row appends to the log.

use fleet::{EntryMetadata, EntrySpec, EntryStatus, EventType, Phase, QueueEntry};
use serde_json::json;

use super::{State, ts};

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

impl State {
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

    pub(super) fn emit_modified(&mut self, session_id: &str) {
        if let Some(obj) = self.render(session_id) {
            let outpost = obj.metadata.outpost_id.clone();
            self.log.push(&outpost, EventType::Modified, obj);
        }
    }

    pub(super) fn touch(&mut self, session_id: &str, now: i64) {
        if let Some(e) = self.entries.get_mut(session_id) {
            e.updated_ms = now;
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

    pub(super) fn enqueue(
        &mut self,
        session_id: &str,
        outpost_id: &str,
        spec: EntrySpec,
        now: i64,
    ) {
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
}
