//! A process's output read by offset from the daemon's follow stream
//! (`/api/v1/processes/{name}/output/follow`), instead of fetching the
//! whole output on every read: one stream per process stays open between
//! reads, and only what lies between the offset asked for and a chunk
//! beyond it is held. The stream's bytes are its lines, each ended by
//! `\n`. Asking for an offset before what the stream has passed (an
//! orchestrator restarted from its record) opens it again from the start.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use sandbox::OutputChunk;

use crate::dataplane::ProcessKey;
use crate::error::Result;
use crate::models::OutputEvent;

/// How long a read waits for output that has not come yet before saying
/// there is none for now (a running process may be quiet for hours).
pub(super) const READ_WINDOW: Duration = Duration::from_millis(250);
/// Streams kept open at most; past it the ended ones are dropped first,
/// then all (each reopens on its next read).
const MAX_READERS: usize = 1024;

/// One process's open follow stream and the bytes it gave that were not
/// read yet.
pub(super) struct Reader {
    /// `None` once the stream ended (the process exited and every line
    /// was sent).
    pub stream: Option<BoxStream<'static, Result<OutputEvent>>>,
    /// Offset of `buffer[0]` in the whole output.
    pub base: u64,
    pub buffer: Vec<u8>,
}

impl Reader {
    pub(super) fn new(stream: BoxStream<'static, Result<OutputEvent>>) -> Self {
        Self {
            stream: Some(stream),
            base: 0,
            buffer: Vec::new(),
        }
    }

    /// Whether bytes at `offset` are held.
    pub(super) fn has(&self, offset: u64) -> bool {
        self.base + self.buffer.len() as u64 > offset
    }

    /// Whether `max` bytes from `offset` are held.
    pub(super) fn holds(&self, offset: u64, max: usize) -> bool {
        self.base + self.buffer.len() as u64 >= offset.saturating_add(max as u64)
    }

    /// Whether `offset` lies before what the stream has passed.
    pub(super) fn passed(&self, offset: u64) -> bool {
        offset < self.base
    }

    /// Appends a line; bytes before `offset` are dropped as they come.
    pub(super) fn push(&mut self, line: &str, offset: u64) {
        self.buffer.extend_from_slice(line.as_bytes());
        self.buffer.push(b'\n');
        self.skip_to(offset);
    }

    fn skip_to(&mut self, offset: u64) {
        if offset > self.base {
            let drop = ((offset - self.base) as usize).min(self.buffer.len());
            self.buffer.drain(..drop);
            self.base += drop as u64;
        }
    }

    /// The held bytes from `offset`, at most `max`; they stay held until a
    /// later read asks past them.
    pub(super) fn chunk(&mut self, offset: u64, max: usize) -> OutputChunk {
        self.skip_to(offset);
        let start = offset.saturating_sub(self.base) as usize;
        let end = self.buffer.len().min(start.saturating_add(max));
        let data = self.buffer.get(start..end).unwrap_or_default().to_vec();
        OutputChunk {
            next_offset: offset + data.len() as u64,
            data,
        }
    }

    /// Takes the lines the stream has ready now, without waiting, until
    /// `max` bytes from `offset` are held.
    pub(super) fn drain_ready(&mut self, offset: u64, max: usize) -> Result<()> {
        while self.base + (self.buffer.len() as u64) < offset + max as u64 {
            let Some(stream) = self.stream.as_mut() else {
                return Ok(());
            };
            match futures::FutureExt::now_or_never(stream.next()) {
                Some(Some(event)) => self.push(&event?.line, offset),
                Some(None) => self.stream = None,
                None => return Ok(()),
            }
        }
        Ok(())
    }
}

/// A process's reader, empty until opened; locked for the whole of a read.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Reader>>>;

/// The open readers, by sandbox and process.
#[derive(Default)]
pub(super) struct Readers {
    open: std::sync::Mutex<HashMap<(String, ProcessKey), Slot>>,
}

impl Readers {
    /// The slot of a process's reader (empty until opened).
    pub(super) fn slot(&self, sandbox_id: &str, process: &ProcessKey) -> Slot {
        let mut open = self.open.lock().expect("readers");
        if open.len() >= MAX_READERS {
            open.retain(|_, slot| {
                slot.try_lock()
                    .map(|r| r.as_ref().is_some_and(|r| r.stream.is_some()))
                    .unwrap_or(true)
            });
            if open.len() >= MAX_READERS {
                open.clear();
            }
        }
        open.entry((sandbox_id.to_owned(), process.clone()))
            .or_default()
            .clone()
    }

    /// Drops a process's reader (its output was read to the end, or its
    /// stream failed).
    pub(super) fn forget(&self, sandbox_id: &str, process: &ProcessKey) {
        self.open
            .lock()
            .expect("readers")
            .remove(&(sandbox_id.to_owned(), process.clone()));
    }

    /// Drops every reader of a sandbox.
    pub(super) fn forget_sandbox(&self, sandbox_id: &str) {
        self.open
            .lock()
            .expect("readers")
            .retain(|(id, _), _| id != sandbox_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader_of(lines: &[&str]) -> Reader {
        let events: Vec<Result<OutputEvent>> = lines
            .iter()
            .map(|l| {
                Ok(OutputEvent {
                    line: (*l).to_owned(),
                    stream: None,
                })
            })
            .collect();
        Reader::new(futures::stream::iter(events).boxed())
    }

    #[test]
    fn chunks_follow_offsets_and_hold_only_what_is_unread() {
        let mut reader = reader_of(&["hello", "world"]);
        reader.drain_ready(0, 4).unwrap();
        // Pulled only until four bytes were held.
        assert_eq!(reader.buffer, b"hello\n");
        let first = reader.chunk(0, 4);
        assert_eq!(
            (first.data.as_slice(), first.next_offset),
            (&b"hell"[..], 4)
        );
        reader.drain_ready(4, 100).unwrap();
        assert!(reader.stream.is_none(), "the stream ended");
        let rest = reader.chunk(4, 100);
        assert_eq!(rest.data, b"o\nworld\n");
        assert_eq!(rest.next_offset, 12);
        assert_eq!(reader.base, 4);
        assert!(reader.chunk(12, 100).data.is_empty());
        assert!(reader.passed(3));
        assert!(!reader.has(12));
    }

    #[test]
    fn bytes_before_the_offset_are_dropped_as_they_come() {
        let mut reader = reader_of(&["aaaa", "bbbb", "cccc"]);
        reader.drain_ready(7, 3).unwrap();
        assert_eq!(reader.base, 7);
        // Pulled only until three bytes from the offset were held.
        assert_eq!(reader.buffer, b"bb\n");
        assert_eq!(reader.chunk(7, 3).data, b"bb\n");
        reader.drain_ready(10, 3).unwrap();
        assert_eq!(reader.chunk(10, 3).data, b"ccc");
    }
}
