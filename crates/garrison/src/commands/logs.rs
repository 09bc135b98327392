//! `garrison logs SESSION [-f] [-n N]`: the remote's output and Garrison's
//! events for one session.
//!
//! Output lines are printed as the remote wrote them; Garrison's events are
//! lines of their own, `[garrison HH:MM:SS] kind key=value ...` (dim on a
//! terminal). The history prints the events, then the output; while
//! following, both are printed as they arrive (Garrison copies the output
//! out of the sandbox every 100 ms or so, so an event can come a line
//! early). Following survives a suspend
//! and a resume (the same session is claimed again and gets a new remote;
//! its output is appended to the same log) and ends, with exit code 0, once
//! the session is over here: done in any way but `suspended`.
//!
//! A session on a backend that can follow output from inside its sandbox
//! (Tensorlake, over its PTY websocket) is followed there instead, when
//! that backend's settings are set here: the events so far, then the
//! sandbox's output log, waiting without waking the sandbox while it is
//! suspended. A session unknown here (served by `garrison deploy
//! tensorlake`) is followed from its sandbox alone.

mod printer;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use orchestrator::Event;

use crate::admin_client::{Admin, AdminError};
use crate::format::{is_final, note, printable};
use crate::store_fallback::{Local, SourceArgs, should_fall_back};
use printer::Printer;
use sandbox::plugin::{FollowStart as Start, LogFollower};

/// How often a followed session is looked at when the stream is quiet.
const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// Bytes read back from the end of the log to find the last `-n` lines.
const TAIL_WINDOW_MIN: u64 = 64 * 1024;
const TAIL_WINDOW_MAX: u64 = 8 << 20;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  garrison logs devin-abc123\n  garrison logs devin-abc123 -n 50\n  \
    garrison logs -f devin-abc123      # follow until the session is over, across suspend and resume"
)]
pub(crate) struct LogsArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    /// The session id (`garrison sessions` lists them).
    #[arg(value_name = "SESSION")]
    pub session: String,

    /// Keep printing as the session runs; exit when it is over here.
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// Only the last N lines of output and the last N events.
    #[arg(short = 'n', long = "lines", value_name = "N")]
    pub lines: Option<usize>,

    /// Print JSON lines: one object per event and per line of output
    ///
    /// An event: {"type": "event", "id", "at_ms" (Unix milliseconds),
    /// "kind", "detail" (an object)}. Output: {"type": "output", "text"},
    /// one line with its newline; a line cut by an event or by the end of
    /// what was written so far comes without it, so joining the texts gives
    /// the output exactly. Notes about the session stay on stderr.
    #[arg(long)]
    pub json: bool,
}

/// What one look at the session shows.
struct Look {
    stage: String,
    backend: String,
    events: Vec<Event>,
    log_bytes: u64,
}

/// The daemon, or the state directory once the daemon is not reachable.
struct Reader {
    admin: Admin,
    source: SourceArgs,
    local: Option<Local>,
}

impl Reader {
    /// Gives up on the daemon for the rest of the command.
    fn fall_back(&mut self, e: AdminError) -> anyhow::Result<&Local> {
        if !should_fall_back(&e) {
            bail!("the daemon at {}: {e}", self.admin.base());
        }
        if self.local.is_none() {
            self.local = Some(self.source.local_instead_of(&self.admin, &e)?);
        }
        Ok(self.local.as_ref().expect("just set"))
    }

    /// `None` for a session neither the daemon nor the store knows.
    async fn look(&mut self, id: &str) -> anyhow::Result<Option<Look>> {
        if self.local.is_none() {
            match self.admin.session(id).await {
                Ok(detail) => {
                    return Ok(detail.map(|d| Look {
                        stage: d.summary.stage,
                        backend: d.summary.backend,
                        events: d.events,
                        log_bytes: d.log_bytes,
                    }));
                }
                Err(e) => {
                    self.fall_back(e)?;
                }
            }
        }
        let local = self.local.as_ref().expect("fallen back");
        // An id no server could send names no session in the store.
        let Ok(checked) = fleet::SessionId::new(id) else {
            return Ok(None);
        };
        let Some(rec) = local.store.session(&checked)? else {
            return Ok(None);
        };
        Ok(Some(Look {
            stage: orchestrator::stage_label(&rec.stage).to_owned(),
            backend: rec.backend.clone(),
            events: local.store.events(&checked, 0)?,
            log_bytes: local.log_len(id),
        }))
    }

    /// The log from `offset`: its text and the next offset.
    async fn log_from(&mut self, id: &str, offset: u64) -> anyhow::Result<(String, u64)> {
        if self.local.is_none() {
            match self.admin.log(id, offset).await {
                Ok(chunk) => return Ok((chunk.text, chunk.next_offset)),
                Err(e) => {
                    self.fall_back(e)?;
                }
            }
        }
        let chunk = self
            .local
            .as_ref()
            .expect("fallen back")
            .log_from(id, offset)?;
        Ok((chunk.text, chunk.next_offset))
    }

    /// Everything from `offset` to the current end.
    async fn log_to_end(&mut self, id: &str, mut offset: u64) -> anyhow::Result<(String, u64)> {
        let mut text = String::new();
        loop {
            let (chunk, next) = self.log_from(id, offset).await?;
            if chunk.is_empty() || next <= offset {
                return Ok((text, offset.max(next)));
            }
            text.push_str(&chunk);
            offset = next;
        }
    }
}

/// The last `n` lines of `text` (read from `start`: a first partial line is
/// dropped when `start` is not the beginning of the log).
fn last_lines(text: &str, n: usize, from_middle: bool) -> String {
    let mut text = text;
    if from_middle {
        text = match text.find('\n') {
            Some(i) => &text[i + 1..],
            None => "",
        };
    }
    let ends_with_newline = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let kept = &lines[lines.len().saturating_sub(n)..];
    let mut out = kept.join("\n");
    if ends_with_newline && !out.is_empty() {
        out.push('\n');
    }
    out
}

pub(crate) async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let id = args.session.clone();
    let admin = args.source.admin_client()?;
    let mut reader = Reader {
        admin: admin.clone(),
        source: args.source.clone(),
        local: None,
    };
    let first = match reader.look(&id).await {
        Ok(Some(first)) => first,
        unknown => {
            // Not known here, or nothing here to ask: served elsewhere (by
            // `garrison deploy tensorlake`, say), its sandbox may still be
            // followed.
            if args.follow
                && let Some((backend, mut follower)) = existing_sandbox_follower(&id).await?
            {
                note(&format!("not known here; following its {backend} sandbox"));
                let mut printer = Printer::new(args.json);
                follow_sandbox(&mut follower, &mut printer, Start::Beginning).await?;
                printer.end()?;
                note(&format!(
                    "the sandbox of session {} is gone",
                    printable(&id)
                ));
                return Ok(());
            }
            unknown?;
            bail!("no session {:?} is known here", printable(&id));
        }
    };

    // The history.
    let mut printer = Printer::new(args.json);
    let mut last_event = 0;
    let events = match args.lines {
        Some(n) => &first.events[first.events.len().saturating_sub(n)..],
        None => &first.events[..],
    };
    for event in events {
        printer.event(event)?;
    }
    if let Some(event) = first.events.last() {
        last_event = event.id;
    }
    // A session whose backend follows from inside is followed in its
    // sandbox, whose output log holds the whole output: it is printed from
    // there, not from Garrison's copy, so that nothing falls between the two.
    let sandbox_follower = match crate::backends::find(&first.backend) {
        Some(backend) if args.follow && backend.follows_logs() => sandbox_follower(backend, &id)?,
        _ => None,
    };
    if let Some(mut follower) = sandbox_follower {
        let mut start = args
            .lines
            .map_or(Start::Beginning, |n| Start::LastLines(n as u64));
        loop {
            follow_sandbox(&mut follower, &mut printer, start).await?;
            // A sandbox made later (a fresh one after a failed resume)
            // is new output from its beginning.
            start = Start::Beginning;
            match reader.look(&id).await? {
                Some(look) if !is_final(&look.stage) => {
                    tokio::time::sleep(FOLLOW_POLL).await;
                }
                look => {
                    printer.end()?;
                    let stage = look.map_or_else(|| "gone".to_owned(), |l| l.stage);
                    note(&format!("session {} {stage}", printable(&id)));
                    return Ok(());
                }
            }
        }
    }

    let start = match args.lines {
        Some(n) => {
            let window = (n as u64)
                .saturating_mul(2048)
                .clamp(TAIL_WINDOW_MIN, TAIL_WINDOW_MAX);
            first.log_bytes.saturating_sub(window)
        }
        None => 0,
    };
    let (text, offset) = reader.log_to_end(&id, start).await?;
    let text = match args.lines {
        Some(n) => last_lines(&text, n, start > 0),
        None => text,
    };
    printer.output(&text)?;
    if !args.follow {
        printer.end()?;
        return Ok(());
    }

    // Following: the stream (when the daemon has one) only wakes us up;
    // what is printed is read by offset, so nothing is shown twice.
    let wake = Arc::new(tokio::sync::Notify::new());
    let streamer = tokio::spawn(wake_on_stream(admin, id.clone(), wake.clone()));
    let result = follow(&mut reader, &mut printer, &id, offset, last_event, &wake).await;
    streamer.abort();
    printer.end()?;
    result.map(drop)
}

/// Prints what arrives until the session is over here; returns the offset
/// reached.
async fn follow(
    reader: &mut Reader,
    printer: &mut Printer,
    id: &str,
    mut offset: u64,
    mut last_event: i64,
    wake: &tokio::sync::Notify,
) -> anyhow::Result<u64> {
    let mut said_asleep = false;
    let mut final_rounds = 0;
    loop {
        let look = reader
            .look(id)
            .await?
            .with_context(|| format!("the session {:?} is no longer known", printable(id)))?;
        // Output first: Garrison copies the remote's output when it looks
        // at the remote, so the events of a round mostly come after it.
        let (text, next) = reader.log_to_end(id, offset).await?;
        printer.output(&text)?;
        offset = next;
        let seen = last_event;
        for event in look.events.iter().filter(|e| e.id > seen) {
            printer.event(event)?;
            last_event = event.id;
        }

        if is_final(&look.stage) {
            // One more look after a moment: the output and the events are
            // read apart from the stage, so a round can miss the last lines.
            final_rounds += 1;
            if final_rounds > 1 {
                printer.end()?;
                note(&format!("session {} {}", printable(id), look.stage));
                return Ok(offset);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        final_rounds = 0;
        if look.stage == "suspended" {
            if !said_asleep {
                printer.end()?;
                note("session suspended; following until Devin resumes it (Ctrl-C to stop)");
                said_asleep = true;
            }
        } else {
            said_asleep = false;
        }
        tokio::select! {
            _ = wake.notified() => {
                // Let a burst of stream events settle into one look.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
        }
    }
}

/// A follower of the session's sandbox on `backend`, if that backend is
/// configured here (e.g. `TENSORLAKE_API_KEY`).
fn sandbox_follower(
    backend: &dyn sandbox::plugin::BackendPlugin,
    id: &str,
) -> anyhow::Result<Option<Box<dyn LogFollower>>> {
    match crate::backends::configure_from_environment(backend, None)? {
        Some(configured) => configured.log_follower(id),
        None => Ok(None),
    }
}

/// For a session unknown here: the first backend configured here that
/// follows from inside and has a sandbox for it.
async fn existing_sandbox_follower(
    id: &str,
) -> anyhow::Result<Option<(&'static str, Box<dyn LogFollower>)>> {
    for backend in crate::backends::ALL.iter().filter(|b| b.follows_logs()) {
        if let Some(follower) = sandbox_follower(*backend, id)?
            && follower.exists().await?
        {
            return Ok(Some((backend.name(), follower)));
        }
    }
    Ok(None)
}

/// Prints the sandbox's output until the sandbox is gone.
async fn follow_sandbox(
    follower: &mut Box<dyn LogFollower>,
    printer: &mut Printer,
    start: Start,
) -> anyhow::Result<()> {
    // A character split between two reads is printed whole.
    let mut carry: Vec<u8> = Vec::new();
    // The follower sees io errors only; a closed stdout is told apart here.
    let mut stdout_closed = false;
    let mut out = |bytes: &[u8]| -> std::io::Result<()> {
        carry.extend_from_slice(bytes);
        let complete = match std::str::from_utf8(&carry) {
            Ok(text) => text.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => carry.len(),
        };
        let text = String::from_utf8_lossy(&carry[..complete]).into_owned();
        carry.drain(..complete);
        printer
            .write_output(&text)
            .inspect_err(|e| stdout_closed |= crate::output::is_closed(e))
    };
    let mut said = |text: &str| note(text);
    let followed = follower.follow(start, &mut out, &mut said).await;
    if stdout_closed {
        return Err(anyhow::Error::new(crate::output::StdoutClosed));
    }
    followed
}

/// Reads the daemon's `/stream` for the session and wakes the follower on
/// anything it sends; reconnects while the command runs. Without a daemon or
/// a stream, following falls back to polling alone.
async fn wake_on_stream(admin: Admin, id: String, wake: Arc<tokio::sync::Notify>) {
    loop {
        if let Ok(mut response) = admin.stream(&id).await {
            while let Ok(Some(_)) = response.chunk().await {
                wake.notify_one();
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_drops_a_partial_first_line_and_keeps_the_ending() {
        assert_eq!(last_lines("a\nb\nc\n", 2, false), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 5, false), "a\nb\nc");
        assert_eq!(last_lines("tial\nb\nc\n", 5, true), "b\nc\n");
        assert_eq!(last_lines("partial", 5, true), "");
        assert_eq!(last_lines("a\n", 0, false), "");
    }
}
