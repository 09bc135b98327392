//! The in-memory event log behind `watch`: every change to a queue row is
//! appended with a sequence number, so a watcher can resume after any cursor
//! it was given (a list's final cursor or a previous event's cursor).

use std::collections::VecDeque;

use fleet::{EventType, QueueEntry};

/// Oldest events are dropped beyond this many; a cursor older than what is
/// kept is answered "gone" so the client relists instead of silently missing
/// changes.
const MAX_EVENTS: usize = 100_000;

/// One logged change of a queue row.
#[derive(Clone, Debug)]
pub(crate) struct LoggedEvent {
    pub seq: u64,
    pub outpost_id: String,
    pub kind: EventType,
    pub object: QueueEntry,
}

/// A cursor the log no longer (or never) covered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CursorGone;

#[derive(Debug, Default)]
pub(crate) struct EventLog {
    events: VecDeque<LoggedEvent>,
    /// Sequence number of the newest event; 0 before the first.
    head: u64,
}

impl EventLog {
    pub fn head(&self) -> u64 {
        self.head
    }

    pub fn push(&mut self, outpost_id: &str, kind: EventType, object: QueueEntry) -> u64 {
        self.head += 1;
        self.events.push_back(LoggedEvent {
            seq: self.head,
            outpost_id: outpost_id.to_owned(),
            kind,
            object,
        });
        if self.events.len() > MAX_EVENTS {
            self.events.drain(..MAX_EVENTS / 10);
        }
        self.head
    }

    /// Events of `outpost_id` with a sequence number above `after`, at most
    /// `max` of them, and the sequence number scanned up to (which may be
    /// past the last returned event, when other outposts' events follow).
    pub fn after(
        &self,
        outpost_id: &str,
        after: u64,
        max: usize,
    ) -> Result<(Vec<LoggedEvent>, u64), CursorGone> {
        if after > self.head {
            return Err(CursorGone);
        }
        let first = self.events.front().map_or(self.head + 1, |e| e.seq);
        // `after == 0` means "from the beginning": whatever is still kept.
        if after != 0 && after + 1 < first {
            return Err(CursorGone);
        }
        let skip = (after + 1).saturating_sub(first) as usize;
        let mut out = Vec::new();
        let mut scanned = after;
        for event in self.events.iter().skip(skip) {
            if out.len() >= max {
                break;
            }
            scanned = event.seq;
            if event.outpost_id == outpost_id {
                out.push(event.clone());
            }
        }
        Ok((out, scanned))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet::EntryMetadata;

    fn obj(id: &str) -> QueueEntry {
        QueueEntry {
            metadata: EntryMetadata {
                session_id: id.into(),
                ..Default::default()
            },
            spec: Default::default(),
            status: Default::default(),
        }
    }

    #[test]
    fn replays_only_after_cursor_and_only_for_the_outpost() {
        let mut log = EventLog::default();
        log.push("a", EventType::Modified, obj("1"));
        let c = log.push("b", EventType::Modified, obj("2"));
        log.push("a", EventType::Deleted, obj("3"));
        log.push("b", EventType::Modified, obj("4"));
        let (evs, scanned) = log.after("a", c, 10).unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].object.metadata.session_id, "3");
        assert_eq!(scanned, 4);
        let (all, _) = log.after("a", 0, 10).unwrap();
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn future_cursor_is_gone() {
        let mut log = EventLog::default();
        log.push("a", EventType::Modified, obj("1"));
        assert_eq!(log.after("a", 5, 10).unwrap_err(), CursorGone);
        assert!(log.after("a", 1, 10).unwrap().0.is_empty());
    }
}
