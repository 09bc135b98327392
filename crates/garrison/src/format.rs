//! How the commands show things on a terminal: ages, sizes, aligned
//! tables, untrusted text made printable, dim notes, and which session
//! stages are over.

use std::io::IsTerminal;

use orchestrator::{Millis, StageLabel};

/// A line of commentary on stderr, dim when stderr is a terminal; none
/// with `-q`.
pub(crate) fn note(text: &str) {
    if crate::verbosity::quiet() {
        return;
    }
    if std::io::stderr().is_terminal() {
        eprintln!("\x1b[2m{text}\x1b[0m");
    } else {
        eprintln!("{text}");
    }
}

/// Unix milliseconds now (one clock for the whole workspace).
pub(crate) use common::now_ms;

/// `45s`, `12m`, `3h05m`, `2d04h`.
pub(crate) fn age(ms: Millis) -> String {
    let s = (ms / 1000).max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `512 B`, `1.5 KB`, `12 MB`, `3.2 GB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value < 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

/// Left-aligned columns separated by two spaces; no trailing spaces.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// A stage in which the session will not run here again unless Devin
/// queues it again: anything done except `suspended`. The labels are the
/// orchestrator's ([`StageLabel`]); one the CLI does not know is not final.
pub(crate) fn is_final(stage: &str) -> bool {
    StageLabel::parse(stage).is_some_and(StageLabel::is_final)
}

/// Done stages (shown by `sessions --all`, counted as history).
pub(crate) fn is_done(stage: &str) -> bool {
    StageLabel::parse(stage).is_some_and(StageLabel::is_done)
}

/// Strips terminal control characters from server or remote text shown in
/// a table (ids are untrusted).
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_sizes_read_short() {
        assert_eq!(age(-5), "0s");
        assert_eq!(age(59_999), "59s");
        assert_eq!(age(61_000), "1m");
        assert_eq!(age(3_900_000), "1h05m");
        assert_eq!(age(90_000_000), "1d01h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1_500), "1.5 KB");
        assert_eq!(bytes(12_000_000), "12 MB");
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["A", "BB"],
            &[vec!["xxx".into(), "y".into()], vec!["z".into(), "".into()]],
        );
        assert_eq!(t, "A    BB\nxxx  y\nz\n");
    }

    #[test]
    fn only_done_stages_but_suspended_are_final() {
        for s in ["claimed", "starting", "running", "finishing", "suspended"] {
            assert!(!is_final(s), "{s}");
        }
        for s in ["terminated", "failed", "released", "vanished", "stopped"] {
            assert!(is_final(s), "{s}");
        }
        assert!(is_done("suspended"));
        assert!(printable("a\x1b[2mb").starts_with("a?"));
    }
}
