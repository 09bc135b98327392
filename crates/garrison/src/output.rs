//! A command's results on stdout, written so that a reader that goes away
//! (`garrison logs ID | head -1`) ends the command quietly instead of with
//! "Broken pipe" or `println!`'s panic.
//!
//! Writes return errors; a broken pipe on stdout comes back marked as
//! [`StdoutClosed`], and `main` ends the process with status 0 and no
//! message on an error that carries the mark. Only stdout's broken pipe is
//! quiet: one on a pipe to a child process (`image build`'s tar, say) is a
//! real failure and is reported as one.

use std::io::{self, Write};

use serde::Serialize;

/// The mark on a write error that means stdout's reader has gone.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// stdout, whose broken-pipe errors carry the [`StdoutClosed`] mark.
pub(crate) struct Stdout(io::Stdout);

impl Stdout {
    pub(crate) fn new() -> Self {
        Self(io::stdout())
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

fn mark(error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        error
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(mark)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(mark)
    }
}

/// Whether a write error of [`Stdout`] says its reader has gone.
pub(crate) fn is_closed(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<StdoutClosed>())
}

/// A write error of [`Stdout`] as a command's error: a closed reader
/// becomes a [`StdoutClosed`] of its own, which `main` recognises.
pub(crate) fn unmark(error: io::Error) -> anyhow::Error {
    if is_closed(&error) {
        anyhow::Error::new(StdoutClosed)
    } else {
        error.into()
    }
}

/// Writes `text` to stdout as it is, and flushes.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut out = Stdout::new();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(unmark)
}

/// Writes `text` and a newline to stdout.
pub(crate) fn println(text: &str) -> anyhow::Result<()> {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    print(&line)
}

/// `value` as indented JSON and a newline: the `--json` of commands that
/// print one document.
pub(crate) fn json(value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    println(&text)
}

/// Whether `error` is, anywhere in its chain, a write to a stdout whose
/// reader has gone.
pub(crate) fn is_stdout_closed(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<StdoutClosed>())
}

/// For the output still written with `println!` (which panics when stdout
/// is closed): ends the process quietly with status 0 on that panic instead
/// of printing it. Only for commands that end when their output is done;
/// long-running services must not die because a reader went away.
pub(crate) fn quiet_exit_on_closed_stdout_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload_as_str().unwrap_or("");
        // std's own wording (`print_to` in std::io::stdio).
        if message.starts_with("failed printing to stdout")
            && message.contains(&io::Error::from_raw_os_error(libc::EPIPE).to_string())
        {
            std::process::exit(0);
        }
        default(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marked_broken_pipe_counts_as_a_closed_stdout() {
        // What `print` and the log printer return for stdout's errors.
        let marked = unmark(mark(io::ErrorKind::BrokenPipe.into()));
        assert!(is_stdout_closed(&marked));
        assert!(is_stdout_closed(&marked.context("printing the rows")));
        // A pipe to a child process that broke is a failure.
        let child = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(!is_stdout_closed(&child));
        let other = unmark(mark(io::ErrorKind::PermissionDenied.into()));
        assert!(!is_stdout_closed(&other));
        assert!(is_closed(&mark(io::ErrorKind::BrokenPipe.into())));
        assert!(!is_closed(&io::ErrorKind::BrokenPipe.into()));
    }
}
