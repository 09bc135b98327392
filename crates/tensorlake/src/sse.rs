//! A minimal server-sent-events reader: enough for the output-follow
//! stream, whose events are single `data:` lines of JSON.

/// Longest line accepted; a longer one is dropped (truncated output is
/// better than unbounded memory).
const MAX_LINE: usize = 1 << 20;

/// Splits a byte stream into SSE `data` payloads.
#[derive(Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    overflow: bool,
}

impl SseParser {
    /// Feeds bytes; returns the payloads of the events they complete.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut events = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                if self.line.len() < MAX_LINE {
                    self.line.push(b);
                } else {
                    self.overflow = true;
                }
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let overflow = std::mem::take(&mut self.overflow);
            if line.is_empty() {
                if !self.data.is_empty() {
                    events.push(std::mem::take(&mut self.data));
                }
            } else if let Some(value) = line.strip_prefix(b"data:")
                && !overflow
            {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if !self.data.is_empty() {
                    self.data.push(b'\n');
                }
                if self.data.len() + value.len() <= MAX_LINE {
                    self.data.extend_from_slice(value);
                }
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.feed(b"event: output\ndata: {\"line\"").is_empty());
        let events = p.feed(b":\"a\"}\r\n\r\n: heartbeat\n\ndata: x\n\n");
        assert_eq!(events, vec![b"{\"line\":\"a\"}".to_vec(), b"x".to_vec()]);
    }
}
