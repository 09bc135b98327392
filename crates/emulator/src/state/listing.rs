//! What `GET /devins` reads, with or without `watch=true`: the account's
//! rows, or one outpost's when `outpost` filters them (Devin's reference,
//! "List queued sessions": "Filter by outpost ID. Applies to both list and
//! watch"; an unknown outpost filters everything out), in keyset order over `(updated_at, id)` from a cursor with a `>=`
//! boundary, as the service does. The row at the cursor comes again
//! (at-least-once), and list and watch cursors are the same positions.

use fleet::{EventType, QueueEntry};

use super::{Stamp, State, StateError};

/// A validated `GET /devins` (non-watch) request.
#[derive(Clone, Debug)]
pub(crate) struct ListQuery {
    /// The `outpost` filter; `None` lists the whole account.
    pub outpost_id: Option<String>,
    pub phase: Option<String>,
    pub acceptor_id: Option<String>,
    pub first: usize,
    pub cursor: Option<Stamp>,
}

/// One page of `GET /devins`.
#[derive(Clone, Debug)]
pub(crate) struct Page {
    pub items: Vec<QueueEntry>,
    pub cursor: String,
    pub has_next_page: bool,
    pub total: u64,
}

/// One row a watch may send: a live row or a tombstone.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub stamp: Stamp,
    pub kind: EventType,
    pub object: QueueEntry,
}

impl State {
    /// One keyset page. Like the service, a full page says
    /// `has_next_page` (there may be more) and its cursor is the last row's
    /// position, so the next page starts with that row again; the last page's
    /// cursor is "now", where a watch continues.
    pub(crate) fn list(&self, q: &ListQuery) -> Result<Page, StateError> {
        self.log.check(q.cursor)?;
        let mut rows: Vec<_> = self
            .entries
            .values()
            .filter(|e| q.outpost_id.as_deref().is_none_or(|o| e.outpost_id == o))
            .filter(|e| q.phase.as_deref().is_none_or(|p| e.phase.as_str() == p))
            .filter(|e| {
                q.acceptor_id
                    .as_deref()
                    .is_none_or(|a| e.acceptor_id.as_deref() == Some(a))
            })
            .filter(|e| q.cursor.is_none_or(|c| e.stamp() >= c))
            .collect();
        rows.sort_by_key(|e| e.stamp());
        let total = rows.len() as u64;
        rows.truncate(q.first);
        let has_next_page = rows.len() == q.first;
        let cursor = match (has_next_page, rows.last()) {
            (true, Some(last)) => last.stamp(),
            _ => self.head_stamp(),
        };
        Ok(Page {
            items: rows
                .iter()
                .filter_map(|e| self.render(&e.session_id))
                .collect(),
            cursor: cursor.cursor(),
            has_next_page,
            total,
        })
    }

    /// What a watch from `cursor` sends next: live rows and tombstones of
    /// the outpost (or, with `None`, the account) at or after it, in keyset order, at most `max`, leaving
    /// out those the stream already sent at the same `updated_at`.
    pub(crate) fn changes_from(
        &self,
        outpost_id: Option<&str>,
        cursor: Option<Stamp>,
        sent: impl Fn(&str, Stamp) -> bool,
        max: usize,
    ) -> Result<Vec<Change>, StateError> {
        self.log.check(cursor)?;
        let at_or_after = |stamp: Stamp| cursor.is_none_or(|c| stamp >= c);
        let mut out: Vec<Change> = self
            .entries
            .values()
            .filter(|e| outpost_id.is_none_or(|o| e.outpost_id == o) && at_or_after(e.stamp()))
            .filter(|e| !sent(&e.session_id, e.stamp()))
            .filter_map(|e| {
                Some(Change {
                    stamp: e.stamp(),
                    kind: EventType::Modified,
                    object: self.render(&e.session_id)?,
                })
            })
            .collect();
        out.extend(
            self.log
                .tombstones(outpost_id)
                .filter(|t| at_or_after(t.stamp))
                .filter(|t| !sent(t.object.session_id(), t.stamp))
                .map(|t| Change {
                    stamp: t.stamp,
                    kind: EventType::Deleted,
                    object: t.object.clone(),
                }),
        );
        out.sort_by_key(|c| c.stamp);
        out.truncate(max);
        Ok(out)
    }
}
