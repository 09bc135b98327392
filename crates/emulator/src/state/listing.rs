//! What `GET /devins` reads: keyset pages of an outpost's queue rows, and
//! with `watch=true` the event log after a cursor. Both cursors are opaque
//! strings to clients and are parsed and encoded here.

use fleet::QueueEntry;

use super::queue::EntryRec;
use super::{State, StateError};
use crate::events::LoggedEvent;

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

impl State {
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
}
