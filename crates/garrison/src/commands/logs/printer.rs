//! How `garrison logs` prints: the remote's output as it was written and
//! Garrison's events on lines of their own (dim on a terminal), or with
//! `--json` one JSON object per event and per line of output.

use std::io::{IsTerminal, Write};

use orchestrator::Event;

use crate::format::printable;
use crate::output::unmark;

/// Writes output and event lines, keeping event lines on lines of their own.
pub(super) struct Printer {
    out: crate::output::Stdout,
    tty: bool,
    at_line_start: bool,
    /// `--json`: JSON lines, with the output's unfinished line held here.
    json: Option<String>,
}

impl Printer {
    pub(super) fn new(json: bool) -> Self {
        Self {
            out: crate::output::Stdout::new(),
            tty: !json && std::io::stdout().is_terminal(),
            at_line_start: true,
            json: json.then(String::new),
        }
    }

    /// Prints `text`, the remote's output.
    pub(super) fn output(&mut self, text: &str) -> anyhow::Result<()> {
        self.write_output(text).map_err(unmark)
    }

    /// Prints `event` on a line of its own.
    pub(super) fn event(&mut self, event: &Event) -> anyhow::Result<()> {
        self.write_event(event).map_err(unmark)
    }

    /// Ends an unfinished line, at the end of the log.
    pub(super) fn end(&mut self) -> anyhow::Result<()> {
        self.write_end().map_err(unmark)
    }

    /// One JSON line.
    fn json_line(&mut self, value: &serde_json::Value) -> std::io::Result<()> {
        writeln!(self.out, "{value}")
    }

    /// `--json`: the output's complete lines, one object each; `all` also
    /// the unfinished one.
    fn json_output(&mut self, text: &str, all: bool) -> std::io::Result<()> {
        let Some(pending) = self.json.as_mut() else {
            return Ok(());
        };
        let ready = take_lines(pending, text, all);
        for line in ready.split_inclusive('\n') {
            self.json_line(&json_output(line))?;
        }
        self.out.flush()
    }

    /// [`Printer::output`] for a caller that needs an `io::Result`.
    pub(super) fn write_output(&mut self, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if self.json.is_some() {
            return self.json_output(text, false);
        }
        let text = if self.tty {
            terminal_safe(text)
        } else {
            text.to_owned()
        };
        self.out.write_all(text.as_bytes())?;
        self.at_line_start = text.ends_with('\n');
        self.out.flush()
    }

    fn write_event(&mut self, event: &Event) -> std::io::Result<()> {
        if self.json.is_some() {
            self.json_output("", true)?;
            self.json_line(&json_event(event))?;
            return self.out.flush();
        }
        if !self.at_line_start {
            self.out.write_all(b"\n")?;
            self.at_line_start = true;
        }
        let line = event_line(event);
        if self.tty {
            writeln!(self.out, "\x1b[2m{line}\x1b[0m")?;
        } else {
            writeln!(self.out, "{line}")?;
        }
        self.out.flush()
    }

    fn write_end(&mut self) -> std::io::Result<()> {
        if self.json.is_some() {
            return self.json_output("", true);
        }
        if !self.at_line_start {
            self.out.write_all(b"\n")?;
            self.at_line_start = true;
        }
        self.out.flush()
    }
}

/// Adds `text` to the unfinished line in `pending` and takes what is
/// ready to print: the complete lines, or with `all` everything.
fn take_lines(pending: &mut String, text: &str, all: bool) -> String {
    pending.push_str(text);
    let complete = if all {
        pending.len()
    } else {
        pending.rfind('\n').map_or(0, |i| i + 1)
    };
    let rest = pending.split_off(complete);
    std::mem::replace(pending, rest)
}

/// `--json`: a piece of output.
fn json_output(text: &str) -> serde_json::Value {
    serde_json::json!({ "type": "output", "text": text })
}

/// `--json`: an event, with the names its fields have in `--help`.
fn json_event(event: &Event) -> serde_json::Value {
    serde_json::json!({
        "type": "event",
        "id": event.id,
        "at_ms": event.at,
        "kind": event.kind,
        "detail": event.detail,
    })
}

/// Remote output on a terminal: no escape sequences or other controls but
/// newline, tab and carriage return.
fn terminal_safe(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && !matches!(c, '\n' | '\t' | '\r') {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// `[garrison 12:03:04] remote_started process=remote-1 remote_sha=ab12`
pub(super) fn event_line(event: &Event) -> String {
    use chrono::TimeZone;
    let time = chrono::Local
        .timestamp_millis_opt(event.at)
        .single()
        .map(|t| t.format("%H:%M:%S").to_string())
        .unwrap_or_else(|| "--:--:--".to_owned());
    let mut line = format!("[garrison {time}] {}", printable(&event.kind));
    match &event.detail {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                let value = match value {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                line.push_str(&format!(" {}={}", printable(key), printable(&value)));
            }
        }
        serde_json::Value::Null => {}
        other => line.push_str(&format!(" {}", printable(&other.to_string()))),
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_output_holds_an_unfinished_line_until_it_ends_or_must_go() {
        let mut pending = String::new();
        assert_eq!(take_lines(&mut pending, "a\nb", false), "a\n");
        assert_eq!(take_lines(&mut pending, "c\nd", false), "bc\n");
        assert_eq!(take_lines(&mut pending, "", false), "");
        assert_eq!(take_lines(&mut pending, "", true), "d");
        assert_eq!(pending, "");
        let line = json_output("bc\n");
        assert_eq!(
            (&line["type"], &line["text"]),
            (&"output".into(), &"bc\n".into())
        );
    }

    #[test]
    fn events_read_as_one_line_with_untrusted_text_made_printable() {
        let event = Event {
            id: 1,
            session_id: fleet::SessionId::new("s").unwrap(),
            at: 0,
            kind: "remote_started".into(),
            detail: serde_json::json!({ "process": "remote-1\x1b[2J", "restart": 2 }),
        };
        let line = event_line(&event);
        assert!(line.starts_with("[garrison "), "{line}");
        assert!(
            line.ends_with("] remote_started process=remote-1?[2J restart=2"),
            "{line}"
        );
        assert_eq!(terminal_safe("ok\x1b[31m\r\n"), "ok?[31m\r\n");
    }
}
