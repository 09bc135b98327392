//! Following the demo's sessions: one line per thing that happened, from
//! Garrison's state store (claims, sandboxes, snapshots, releases) and the
//! emulator's transcript (steps, Devin's sleep and end), and the demo's own
//! moves as Devin (resume, terminate).

use std::time::{Duration, Instant};

use emulator::{Emulator, SessionView, TranscriptEvent};
use orchestrator::{Event, Serving, stage_label};
use tokio_util::sync::CancellationToken;

use super::scenario::{self, Action, Role, Tracked};

/// How often the sessions are looked at.
const TICK: Duration = Duration::from_millis(150);
/// Output lines shown under a step.
const OUTPUT_LINES: usize = 3;

/// How following ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// Every session finished.
    AllFinished,
    /// The hang guard ran out first.
    TimedOut,
    /// Ctrl-C.
    Interrupted,
}

/// Prints the table header.
pub(super) fn header() {
    println!();
    println!(
        "  {:>6}  {:<7} {:<11} what happened",
        "time", "session", "stage"
    );
}

/// Follows until every session finished, `guard` passed, or `stop`.
pub(super) async fn follow(
    emu: &Emulator,
    serving: &Serving,
    sessions: &mut [Tracked],
    started: Instant,
    guard: Duration,
    stop: &CancellationToken,
) -> Ended {
    let deadline = Instant::now() + guard;
    loop {
        for t in sessions.iter_mut() {
            let Some(view) = emu.session(&t.id) else {
                continue;
            };
            step(emu, serving, t, &view, started);
        }
        if sessions.iter().all(|t| t.finished.is_some()) {
            return Ended::AllFinished;
        }
        if Instant::now() > deadline {
            return Ended::TimedOut;
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.cancelled() => return Ended::Interrupted,
        }
    }
}

/// Looks at one session once: prints what is new, plays Devin's move.
fn step(emu: &Emulator, serving: &Serving, t: &mut Tracked, view: &SessionView, started: Instant) {
    // The emulator made the id; one that fails the check has no record.
    let id = fleet::SessionId::new(t.id.as_str()).ok();
    let stage = id
        .as_ref()
        .and_then(|id| serving.store.session(id).ok().flatten())
        .map(|rec| stage_label(&rec.stage).to_owned());
    if let Some(stage) = stage
        && t.stages.last() != Some(&stage)
    {
        t.stages.push(stage);
    }
    let events = id
        .as_ref()
        .and_then(|id| serving.store.events(id, t.events_after).ok())
        .unwrap_or_default();
    for event in &events {
        t.events_after = t.events_after.max(event.id);
        if let Some(text) = describe_event(event) {
            line(started, t, &text);
        }
    }
    for entry in view.transcript.iter().skip(t.transcript_seen) {
        if let Some(text) = describe_transcript(t, entry) {
            line(started, t, &text);
        }
    }
    t.transcript_seen = view.transcript.len();

    match scenario::next_action(t, view) {
        Some(Action::Resume) => match emu.resume(&t.id, Role::resume_script()) {
            Ok(()) => {
                t.resumed = true;
                line(started, t, "Devin resumes it: queued again as kind=resume");
            }
            Err(e) => line(started, t, &format!("resuming failed: {e:#}")),
        },
        Some(Action::Terminate) => match emu.terminate(&t.id) {
            Ok(()) => {
                t.terminate_sent = true;
                line(started, t, "Devin ends the session while it waits");
            }
            Err(e) => line(started, t, &format!("terminating failed: {e:#}")),
        },
        None => {}
    }
    if t.finished.is_none() && scenario::is_finished(t, view) {
        t.finished = Some(t.enqueued.elapsed());
        line(started, t, "done");
    }
}

fn line(started: Instant, t: &Tracked, what: &str) {
    let secs = started.elapsed().as_secs_f64();
    let mut lines = what.lines();
    println!(
        "  {secs:>5.1}s  {:<7} {:<11} {}",
        t.label(),
        t.stage(),
        lines.next().unwrap_or_default()
    );
    for more in lines {
        println!("  {:>6}  {:<7} {:<11} {more}", "", "", "");
    }
}

/// Garrison's events worth a line; the rest (renewals, SHAs) are noise here.
fn describe_event(event: &Event) -> Option<String> {
    let detail = &event.detail;
    let text = match event.kind.as_str() {
        "claimed" => "Garrison claims it".to_owned(),
        "starting" => format!(
            "creating a {} sandbox",
            detail["backend"].as_str().unwrap_or("new")
        ),
        "restored" => format!(
            "workspace restored from its snapshot ({})",
            human_bytes(detail["bytes"].as_u64().unwrap_or(0))
        ),
        "sandbox_created" => "sandbox ready".to_owned(),
        "remote_started" => "devin-remote started; it dials Devin's gateway".to_owned(),
        "remote_restart" => "the remote crashed; restarting it".to_owned(),
        "snapshot" => format!(
            "workspace snapshotted ({})",
            human_bytes(detail["bytes"].as_u64().unwrap_or(0))
        ),
        "sandbox_destroyed" => "sandbox destroyed".to_owned(),
        "released" => "claim released".to_owned(),
        "start_failed" | "finish_failed" | "start_refused" => format!(
            "{}: {}",
            event.kind.replace('_', " "),
            detail["error"]
                .as_str()
                .or(detail["reason"].as_str())
                .unwrap_or("see garrison logs")
        ),
        _ => return None,
    };
    Some(text)
}

/// The emulator's steps and stop messages.
fn describe_transcript(t: &Tracked, entry: &TranscriptEvent) -> Option<String> {
    let d = &entry.detail;
    match entry.kind.as_str() {
        "step" if d.get("exit_code").is_some() => {
            let what = match (d["command"].as_str(), d["path"].as_str()) {
                (Some(command), _) => format!("run `{}`", shorten(command, 60)),
                (_, Some(path)) => format!("write {path}"),
                _ => "step".to_owned(),
            };
            let code = d["exit_code"].as_i64().unwrap_or(-1);
            let verdict = if code == 0 {
                "ok".to_owned()
            } else {
                format!("exit {code}")
            };
            let mut text = format!("{what}: {verdict}");
            let output = d["output"].as_str().unwrap_or_default();
            let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
            for out in lines.iter().skip(lines.len().saturating_sub(OUTPUT_LINES)) {
                text.push_str(&format!("\n  | {}", shorten(out, 90)));
            }
            Some(text)
        }
        "stop" => Some(match d["message"].as_str() {
            Some("sleep") => "Devin puts the session to sleep".to_owned(),
            Some("end") if t.role == Role::Worker => return None,
            Some("end") => "Devin ends the session: all steps done".to_owned(),
            _ => return None,
        }),
        _ => None,
    }
}

fn shorten(text: &str, max: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= max {
        text
    } else {
        let cut: String = text.chars().take(max - 3).collect();
        format!("{cut}...")
    }
}

pub(super) fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_shortened_on_one_line() {
        assert_eq!(shorten("a  b\n c", 10), "a b c");
        assert_eq!(shorten(&"x".repeat(20), 10), "xxxxxxx...");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(human_bytes(12), "12 bytes");
    }
}
