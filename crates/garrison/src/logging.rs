//! Process-wide structured logging, written to stderr for people and
//! machines alike: colour only on a terminal (and never with `NO_COLOR`),
//! no timestamp of our own under systemd (journald stamps each line), or
//! one JSON object per line.

use std::ffi::OsStr;
use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub(crate) use orchestrator::settings::LogFormat;

/// How text lines look on the stream they are written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Style {
    /// ANSI colours: only a terminal shows them; a file, a pipe or the
    /// journal would keep the escapes as text.
    pub colour: bool,
    /// Our own timestamp; journald adds one to every line it stores.
    pub timestamp: bool,
}

impl Style {
    /// The style for a stream: `terminal` whether it is one; `no_color`
    /// and `journal_stream` the variables of those names; `on_journal`
    /// whether `JOURNAL_STREAM` names this very stream (systemd sets it
    /// for the service's stdout/stderr; a child writing elsewhere may
    /// inherit it).
    pub(crate) fn decide(
        terminal: bool,
        no_color: Option<&OsStr>,
        journal_stream: Option<&OsStr>,
        on_journal: bool,
    ) -> Self {
        // https://no-color.org: set and not empty.
        let no_color = no_color.is_some_and(|v| !v.is_empty());
        let journald = journal_stream.is_some_and(|v| !v.is_empty()) && on_journal;
        Self {
            colour: terminal && !no_color,
            timestamp: !journald,
        }
    }

    /// The style for this process's stderr.
    pub(crate) fn for_stderr() -> Self {
        let journal_stream = std::env::var_os("JOURNAL_STREAM");
        let on_journal = journal_stream
            .as_deref()
            .is_some_and(|v| stderr_is(&v.to_string_lossy()));
        Self::decide(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
            journal_stream.as_deref(),
            on_journal,
        )
    }
}

/// Whether stderr is the stream `JOURNAL_STREAM` names ("DEVICE:INODE").
fn stderr_is(journal_stream: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some((dev, ino)) = journal_stream.split_once(':') else {
        return false;
    };
    // /proc/self/fd/2 leads to the stream itself (a socket under systemd).
    match std::fs::metadata("/proc/self/fd/2") {
        Ok(meta) => dev.parse() == Ok(meta.dev()) && ino.parse() == Ok(meta.ino()),
        Err(_) => false,
    }
}

/// Installs the subscriber: `RUST_LOG` when set, else `info`.
pub(crate) fn init(format: LogFormat) {
    init_with_default(format, "info");
}

/// Installs the subscriber: `-q`/`-v`, else `RUST_LOG` when set, else
/// `default` (see [`crate::verbosity`]).
pub(crate) fn init_with_default(format: LogFormat, default: &str) {
    let filter: EnvFilter = crate::verbosity::filter(default);
    let style = Style::for_stderr();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(style.colour);
    let _ = match (format, style.timestamp) {
        (LogFormat::Text, true) => builder.try_init(),
        (LogFormat::Text, false) => builder.without_time().try_init(),
        (LogFormat::Json, _) => builder.json().flatten_event(true).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(Style::decide(true, None, None, false).colour);
        assert!(Style::decide(true, os(""), None, false).colour);
        assert!(!Style::decide(true, os("1"), None, false).colour);
        assert!(!Style::decide(false, None, None, false).colour);
    }

    #[test]
    fn no_timestamp_of_our_own_on_the_journal() {
        assert!(Style::decide(false, None, None, false).timestamp);
        assert!(!Style::decide(false, None, os("8:123"), true).timestamp);
        // Inherited by a process writing somewhere else: stamped.
        assert!(Style::decide(false, None, os("8:123"), false).timestamp);
    }

    #[test]
    fn the_journal_stream_is_recognised_by_device_and_inode() {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata("/proc/self/fd/2").expect("stderr");
        assert!(stderr_is(&format!("{}:{}", meta.dev(), meta.ino())));
        assert!(!stderr_is(&format!("{}:{}", meta.dev(), meta.ino() + 1)));
        assert!(!stderr_is("garbage"));
    }
}
