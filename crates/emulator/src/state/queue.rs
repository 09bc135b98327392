//! The queue rows: adding one, rendering it as the API shows it, and
//! stamping every change with a fresh `updated_at` (a deleted row becomes a
//! tombstone the watch reports as DELETED).

use fleet::{EntryMetadata, EntrySpec, EntryStatus, Phase, QueueEntry};
use serde_json::json;

use super::{Stamp, State, ts};
use crate::events::Tombstone;

/// A queue row. `(updated_ms, row)` is its keyset position; a resume entry
/// gets a new row id.
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

impl EntryRec {
    pub(crate) fn stamp(&self) -> Stamp {
        Stamp {
            ms: self.updated_ms,
            row: self.row,
        }
    }
}

impl State {
    /// The row as the API shows it (without claim-only fields).
    pub(crate) fn render(&self, session_id: &str) -> Option<QueueEntry> {
        let e = self.entries.get(session_id)?;
        let status = self
            .sessions
            .get(session_id)
            .map(|s| s.status.clone())
            .unwrap_or_default();
        Some(QueueEntry {
            metadata: EntryMetadata {
                session_id: fleet::SessionId::new(e.session_id.clone())
                    .expect("the emulator checks an id when it makes the session"),
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

    /// The next `updated_at`: `now`, or just after the last one handed out.
    fn next_stamp_ms(&mut self, now: i64) -> i64 {
        self.last_stamp_ms = now.max(self.last_stamp_ms + 1);
        self.last_stamp_ms
    }

    /// Where a list's final cursor points: after every change so far.
    pub(crate) fn head_stamp(&self) -> Stamp {
        Stamp {
            ms: self.last_stamp_ms + 1,
            row: 0,
        }
    }

    /// A row changed: it moves to the end of the keyset order (its
    /// `updated_at` becomes unique and newest) and watchers wake.
    pub(super) fn emit_modified(&mut self, session_id: &str) {
        let Some(updated) = self.entries.get(session_id).map(|e| e.updated_ms) else {
            return;
        };
        let stamp = self.next_stamp_ms(updated);
        if let Some(e) = self.entries.get_mut(session_id) {
            e.updated_ms = stamp;
        }
        self.log.changed();
    }

    pub(super) fn touch(&mut self, session_id: &str, now: i64) {
        if let Some(e) = self.entries.get_mut(session_id) {
            e.updated_ms = now;
        }
    }

    /// Drops a queue row; a watch reports it as DELETED. The session itself
    /// remains.
    pub(crate) fn remove_entry(&mut self, session_id: &str, now: i64) -> bool {
        let Some(row) = self.entries.get(session_id).map(|e| e.row) else {
            return false;
        };
        let ms = self.next_stamp_ms(now);
        self.touch(session_id, ms);
        let Some(object) = self.render(session_id) else {
            return false;
        };
        self.entries.remove(session_id);
        self.log.deleted(Tombstone {
            outpost_id: object.metadata.outpost_id.clone(),
            stamp: Stamp { ms, row },
            object,
        });
        self.record(session_id, now, "entry_removed", json!({}));
        true
    }

    /// Expires every cursor handed out so far (the service forgot the
    /// deletes they would need): reading from one is answered 410.
    pub(crate) fn expire_cursors(&mut self) {
        // Past every position handed out, a list's final one included;
        // cursors handed out afterwards are later still.
        let ms = self.next_stamp_ms(self.last_stamp_ms + 1);
        let upto = Stamp { ms, row: u64::MAX };
        self.log.expire(upto);
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
