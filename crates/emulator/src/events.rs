//! Positions in the queue and the change log behind list and watch.
//!
//! The real service (as modelled by Cognition's operator) has no event log:
//! list and watch both read the rows in keyset order over
//! `(updated_at, id)` from a cursor with a `>=` boundary, so the row at a
//! cursor is delivered again (at-least-once) and a list cursor is a watch
//! cursor. Deleted rows are tombstones that a watch reports as DELETED;
//! tombstones are kept for a while, and a cursor older than the oldest one
//! that was purged is answered 410 (the client could have missed a delete).

use std::collections::VecDeque;

use fleet::QueueEntry;

/// Tombstones kept; the oldest are purged beyond this many.
const MAX_TOMBSTONES: usize = 10_000;

/// A keyset position: a row's `updated_at` (Unix ms, unique per change) and
/// its row id. Ordered as the service orders rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Stamp {
    pub ms: i64,
    pub row: u64,
}

/// Prefix of every cursor, so a cursor from another scheme is refused
/// rather than misread.
const CURSOR_PREFIX: &str = "v1:";

impl Stamp {
    /// `v1:<ms>.<row>`; `v1:<ms>` alone means the first row at that instant.
    pub(crate) fn parse_cursor(s: &str) -> Option<Self> {
        let rest = s.strip_prefix(CURSOR_PREFIX)?;
        let (ms, row) = match rest.split_once('.') {
            Some((ms, row)) => (ms, row.parse().ok()?),
            None => (rest, 0),
        };
        let ms: i64 = ms.parse().ok()?;
        (ms >= 0).then_some(Stamp { ms, row })
    }

    pub(crate) fn cursor(&self) -> String {
        format!("{CURSOR_PREFIX}{}.{}", self.ms, self.row)
    }
}

/// A deleted row, as the watch reports it.
#[derive(Clone, Debug)]
pub(crate) struct Tombstone {
    pub outpost_id: String,
    pub stamp: Stamp,
    pub object: QueueEntry,
}

/// A cursor older than what the log still covers.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CursorGone;

#[derive(Debug, Default)]
pub(crate) struct EventLog {
    /// Counts changes; watchers wake when it moves.
    head: u64,
    tombstones: VecDeque<Tombstone>,
    /// Cursors at or below this position may have missed a purged
    /// tombstone.
    horizon: Option<Stamp>,
    /// Bumped when every cursor is expired at once; open streams end.
    epoch: u64,
}

impl EventLog {
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Records that a row changed.
    pub(crate) fn changed(&mut self) {
        self.head += 1;
    }

    /// Records a deleted row.
    pub(crate) fn deleted(&mut self, tombstone: Tombstone) {
        self.head += 1;
        self.tombstones.push_back(tombstone);
        while self.tombstones.len() > MAX_TOMBSTONES {
            if let Some(old) = self.tombstones.pop_front() {
                self.horizon = self.horizon.max(Some(old.stamp));
            }
        }
    }

    /// Forgets every tombstone and expires every cursor up to `upto`.
    pub(crate) fn expire(&mut self, upto: Stamp) {
        self.tombstones.clear();
        self.horizon = self.horizon.max(Some(upto));
        self.epoch += 1;
        self.head += 1;
    }

    /// Whether reading from `cursor` could miss a purged delete.
    pub(crate) fn check(&self, cursor: Option<Stamp>) -> Result<(), CursorGone> {
        match (cursor, self.horizon) {
            (Some(c), Some(h)) if c <= h => Err(CursorGone),
            _ => Ok(()),
        }
    }

    /// Tombstones of one outpost, or of the account with `None`.
    pub(crate) fn tombstones<'a>(
        &'a self,
        outpost_id: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Tombstone> {
        self.tombstones
            .iter()
            .filter(move |t| outpost_id.is_none_or(|o| t.outpost_id == o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_schemes() {
        let s = Stamp {
            ms: 1_700_000_000_123,
            row: 7,
        };
        assert_eq!(Stamp::parse_cursor(&s.cursor()), Some(s));
        assert_eq!(Stamp::parse_cursor("v1:5"), Some(Stamp { ms: 5, row: 0 }));
        for bad in ["ev.3", "page.1.2", "v1:", "v1:-5", "v1:x.1", "junk"] {
            assert_eq!(Stamp::parse_cursor(bad), None, "{bad}");
        }
    }

    #[test]
    fn expiry_refuses_old_cursors_only() {
        let mut log = EventLog::default();
        let old = Stamp { ms: 10, row: 1 };
        assert!(log.check(Some(old)).is_ok());
        log.expire(Stamp {
            ms: 20,
            row: u64::MAX,
        });
        assert_eq!(log.check(Some(old)), Err(CursorGone));
        assert!(
            log.check(None).is_ok(),
            "from the beginning is always valid"
        );
        assert!(log.check(Some(Stamp { ms: 21, row: 0 })).is_ok());
    }
}
