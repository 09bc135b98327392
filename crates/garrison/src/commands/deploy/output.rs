//! Where `garrison deploy` prints what the backend reports: its lines on
//! stdout, its notes on stderr, and the deployed serve's output on stdout
//! without terminal control sequences.

use std::io::{self, Write};

use sandbox::plugin::deploy::{DeployOutput, printable};

/// stdout and stderr.
pub(super) struct Terminal;

impl DeployOutput for Terminal {
    fn say(&mut self, line: &str) {
        println!("{line}");
    }

    fn note(&mut self, line: &str) {
        eprintln!("{line}");
    }

    fn log_line(&mut self, line: &str) -> io::Result<()> {
        let mut out = io::stdout();
        writeln!(out, "{}", printable(line))?;
        out.flush()
    }

    fn log_text(&mut self, text: &[u8]) -> io::Result<()> {
        let mut out = io::stdout();
        write!(out, "{}", printable_text(text))?;
        out.flush()
    }
}

/// Log bytes without terminal control sequences, line ends kept.
fn printable_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .split_inclusive('\n')
        .map(|line| match line.strip_suffix('\n') {
            Some(body) => format!("{}\n", printable(body)),
            None => printable(line),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_text_keeps_line_ends_and_drops_control_sequences() {
        assert_eq!(
            printable_text(b"\x1b[2mdim\x1b[0m\nnext\tcol\r\npartial"),
            "?[2mdim?[0m\nnext\tcol?\npartial"
        );
    }
}
