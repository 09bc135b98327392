//! A minimal, bounded Server-Sent Events parser (the subset of the HTML
//! "event stream" format the fleet API uses).
//!
//! Lines end in LF, CRLF or CR, also when a CRLF is split across chunks.
//! `data:` lines accumulate (joined with LF) until a blank line dispatches the
//! event; `:` lines are comments (keepalives); `event:`, `id:`, `retry:` and
//! unknown fields are ignored. A line or event longer than the cap is
//! discarded whole (reported as [`Frame::Oversized`]) instead of growing
//! memory without bound or killing the stream: the next event still arrives.

/// What the parser hands out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// The `data` of one event, lines joined with `\n`.
    Data(Vec<u8>),
    /// An event was dropped for exceeding the size cap.
    Oversized,
}

#[derive(Debug)]
pub(crate) struct SseParser {
    max: usize,
    line: Vec<u8>,
    /// The current line passed `max`; its bytes are being dropped.
    line_overflow: bool,
    data: Vec<u8>,
    has_data: bool,
    /// The current event passed `max`; drop it at the next blank line.
    discard_event: bool,
    /// The previous chunk ended in CR, so a leading LF belongs to it.
    after_cr: bool,
}

impl SseParser {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            line: Vec::new(),
            line_overflow: false,
            data: Vec::new(),
            has_data: false,
            discard_event: false,
            after_cr: false,
        }
    }

    /// Consumes a chunk, appending complete events to `out`.
    pub(crate) fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Frame>) {
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.push_line_bytes(chunk);
                    return;
                }
                Some(i) => {
                    self.push_line_bytes(&chunk[..i]);
                    self.end_line(out);
                    let crlf = chunk[i] == b'\r' && chunk.get(i + 1) == Some(&b'\n');
                    if chunk[i] == b'\r' && i + 1 == chunk.len() {
                        self.after_cr = true;
                    }
                    chunk = &chunk[i + if crlf { 2 } else { 1 }..];
                }
            }
        }
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) {
        if self.line_overflow {
            return;
        }
        if self.line.len() + bytes.len() > self.max {
            self.line_overflow = true;
            self.line.clear();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self, out: &mut Vec<Frame>) {
        let line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.line_overflow) {
            self.discard_event = true;
            return;
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &b""[..]),
        };
        if field != b"data" || self.discard_event {
            return;
        }
        if self.data.len() + value.len() + 1 > self.max {
            self.discard_event = true;
            self.data.clear();
            return;
        }
        self.data.extend_from_slice(value);
        self.data.push(b'\n');
        self.has_data = true;
    }

    fn dispatch(&mut self, out: &mut Vec<Frame>) {
        let mut data = std::mem::take(&mut self.data);
        let has_data = std::mem::take(&mut self.has_data);
        if std::mem::take(&mut self.discard_event) {
            out.push(Frame::Oversized);
            return;
        }
        if !has_data {
            return;
        }
        data.pop(); // the LF after the last data line
        // An all-blank payload carries nothing; some servers use it as a
        // heartbeat.
        if data.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        out.push(Frame::Data(data));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_chunks(max: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut p = SseParser::new(max);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out);
        }
        out
    }

    fn data(s: &str) -> Frame {
        Frame::Data(s.as_bytes().to_vec())
    }

    #[test]
    fn single_and_multi_line_data() {
        let out = parse_chunks(
            1024,
            &[b"data: {\"a\":1}\n\ndata: line1\ndata:line2\ndata:  indented\n\n"],
        );
        assert_eq!(
            out,
            vec![data("{\"a\":1}"), data("line1\nline2\n indented")]
        );
    }

    #[test]
    fn comments_event_and_id_fields_are_ignored() {
        let out = parse_chunks(
            1024,
            &[b": keepalive\n\nevent: update\nid: 7\nretry: 10\n: note\ndata: x\nunknown: y\n\n"],
        );
        assert_eq!(out, vec![data("x")]);
    }

    #[test]
    fn every_line_ending_and_split_crlf() {
        let out = parse_chunks(
            1024,
            &[b"data: a\r\n\r\ndata: b\r\rdata: c\r", b"\n\r", b"\n"],
        );
        assert_eq!(out, vec![data("a"), data("b"), data("c")]);
    }

    #[test]
    fn event_split_at_every_byte() {
        let text = b"data: {\"k\":\n: ka\r\ndata: 2}\r\n\r\n";
        let chunks: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse_chunks(1024, &chunks), vec![data("{\"k\":\n2}")]);
    }

    #[test]
    fn incomplete_event_at_end_is_not_dispatched() {
        assert_eq!(parse_chunks(1024, &[b"data: a\n"]), vec![]);
        assert_eq!(parse_chunks(1024, &[b"data:\n\n"]), vec![]);
    }

    #[test]
    fn oversized_line_or_event_is_dropped_and_parsing_continues() {
        let long_line = format!("data: {}\n\ndata: ok\n\n", "x".repeat(100));
        assert_eq!(
            parse_chunks(32, &[long_line.as_bytes()]),
            vec![Frame::Oversized, data("ok")]
        );
        let many_lines = format!("{}\ndata: ok\n\n", "data: 0123456789\n".repeat(10));
        assert_eq!(
            parse_chunks(32, &[many_lines.as_bytes()]),
            vec![Frame::Oversized, data("ok")]
        );
        // A huge comment line also cannot grow memory; its event is dropped.
        let long_comment = format!(": {}\n\ndata: ok\n\n", "k".repeat(100));
        assert_eq!(
            parse_chunks(32, &[long_comment.as_bytes()]),
            vec![Frame::Oversized, data("ok")]
        );
    }
}
