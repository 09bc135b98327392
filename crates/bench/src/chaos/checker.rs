//! The checker: pure functions over a run's [`History`] that find every
//! breach of the invariants a fleet under faults must keep. Each finding
//! names its invariant, and its session or host, so the report can print
//! that session's history.

use std::collections::BTreeMap;

use emulator::{SessionView, TranscriptEvent};
use fleet::{Phase, SessionStatus};

use super::history::{FaultKind, History, SessionHistory};
use super::kept::kept_for_retention;

/// Every invariant, as named in the JSON report.
pub(crate) const INVARIANTS: [&str; 7] = [
    "two_live_remotes",
    "resume_saw_wrong_workspace",
    "claim_held_past_deadline",
    "leftovers_after_end",
    "not_ready_after_heal",
    "unexpected_exit",
    "sessions_unfinished",
];

/// Room for a poll or a planner tick on top of each bound.
const GRACE_MS: i64 = 5_000;

/// A reconnecting remote may find its old, stalled connection still
/// registered for this long after its host's cut healed.
const STALE_CONNECTION_MS: i64 = 60_000;

/// One breach.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Violation {
    /// Which invariant (one of [`INVARIANTS`]).
    pub invariant: &'static str,
    /// The session it concerns, if one.
    pub session: Option<String>,
    /// The host it concerns, if one.
    pub host: Option<usize>,
    /// What was seen.
    pub message: String,
}

/// Every breach in `history`.
pub(crate) fn check(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    for s in &history.sessions {
        two_live_remotes(history, s, &mut found);
        resumes(history, s, &mut found);
        claims(history, s, &mut found);
        unfinished(s, &mut found);
    }
    leftovers(history, &mut found);
    readiness(history, &mut found);
    exits(history, &mut found);
    found
}

/// Breaches by invariant, every invariant present.
pub(crate) fn counts(found: &[Violation]) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> = INVARIANTS.iter().map(|i| (*i, 0)).collect();
    for v in found {
        *counts.entry(v.invariant).or_default() += 1;
    }
    counts
}

fn violation(
    invariant: &'static str,
    session: Option<&str>,
    host: Option<usize>,
    message: String,
) -> Violation {
    Violation {
        invariant,
        session: session.map(str::to_owned),
        host,
        message,
    }
}

fn detail_str<'a>(e: &'a TranscriptEvent, key: &str) -> Option<&'a str> {
    e.detail.get(key).and_then(|v| v.as_str())
}

/// The gateway refuses a second remote of a session, recording it: any
/// refusal is a second remote, unless it came from the same host as the
/// connected one just after that host was cut off (its remote redialling
/// while the stalled connection is still registered).
fn two_live_remotes(history: &History, s: &SessionHistory, found: &mut Vec<Violation>) {
    let id = &s.view.session_id;
    for e in s.view.events("duplicate_connection") {
        let peer = detail_str(e, "peer");
        let holder = e.detail.get("connected").and_then(|c| c.as_u64());
        let holder_peer = s
            .view
            .events("connected")
            .find(|c| c.detail.get("conn").and_then(|v| v.as_u64()) == holder && holder.is_some())
            .and_then(|c| detail_str(c, "peer"));
        let host = peer.and_then(|p| history.host_of_addr(p));
        let redial = peer.is_some()
            && peer == holder_peer
            && host.is_some_and(|h| {
                history.faults.iter().any(|f| {
                    f.kind.cuts_gateway()
                        && f.host == Some(h)
                        && f.start_ms <= e.at_ms
                        && f.end_or(history.end_ms) + STALE_CONNECTION_MS >= e.at_ms
                })
            });
        if !redial {
            found.push(violation(
                "two_live_remotes",
                Some(id),
                host,
                format!(
                    "a remote from {} dialled at {} while connection {:?} (from {}) was live",
                    peer.unwrap_or("?"),
                    e.at_ms,
                    holder,
                    holder_peer.unwrap_or("?")
                ),
            ));
        }
    }
}

/// One phase of a sleeper (phase 0 until the first `resumed`, and so on):
/// what its look at the workspace printed, if it ran, and whether its
/// suspend completed (the holder released the claim after the session
/// was suspended, so its snapshot was stored).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct PhaseSeen {
    /// The `saw ...` line of the phase's first step.
    pub sighting: Option<String>,
    /// Whether the phase's suspend completed.
    pub suspend_completed: bool,
    /// Whether the acceptor that completed the suspend also served the
    /// phase's note write: only then does the stored workspace hold the
    /// phase's note. A write served in another sandbox (whose host lost
    /// the claim) is not in it; the completer stored what its own sandbox
    /// started from.
    pub note_stored: bool,
}

/// The session's phases, from its transcript. `acceptor_of` names the
/// acceptor running at a remote's address (`None` where unknown: then the
/// claim's holder is taken to serve it).
pub(crate) fn phases(
    view: &SessionView,
    acceptor_of: &dyn Fn(&str) -> Option<String>,
) -> Vec<PhaseSeen> {
    let mut phases = vec![PhaseSeen::default()];
    let mut holder: Option<String> = None;
    // Whose sandbox the phase's remote runs in, while they still hold the
    // claim: only they can complete the phase's suspend (another
    // acceptor's claim and release of the row stores nothing). Taken from
    // the remote's address, not the claim: a remote of a host whose claim
    // just lapsed can dial in after another host claimed the session, and
    // what it writes goes to its own sandbox.
    let mut server: Option<String> = None;
    let mut suspended = false;
    // Who served the current phase's note write.
    let mut note_writer: Option<String> = None;
    for e in &view.transcript {
        let current = phases.last_mut().expect("never empty");
        match e.kind.as_str() {
            "resumed" => {
                phases.push(PhaseSeen::default());
                suspended = false;
                server = None;
                note_writer = None;
            }
            "claimed" | "renewed" => {
                holder = detail_str(e, "acceptor_id").map(str::to_owned);
                if server.is_some() && server != holder {
                    server = None;
                }
            }
            "claim_expired" | "entry_removed" => {
                holder = None;
                server = None;
            }
            "connected" => {
                server = detail_str(e, "peer")
                    .and_then(acceptor_of)
                    .or_else(|| holder.clone());
            }
            "status" if detail_str(e, "to") == Some("suspended") => suspended = true,
            "released" => {
                let releaser = detail_str(e, "acceptor_id");
                if suspended && server.is_some() && server.as_deref() == releaser {
                    current.suspend_completed = true;
                    current.note_stored = note_writer.is_some() && note_writer == server;
                }
                holder = None;
                server = None;
            }
            "step" if detail_str(e, "path") == Some(NOTE_FILE) => note_writer = server.clone(),
            "step" if e.detail.get("command").is_some() && current.sighting.is_none() => {
                current.sighting = detail_str(e, "output")
                    .and_then(|o| o.lines().rev().find(|l| l.starts_with("saw ")))
                    .map(|l| l.trim().to_owned());
            }
            _ => {}
        }
    }
    phases
}

/// The outputs of the session's `saw ...` steps (each resume's look at its
/// workspace), in order.
pub(crate) fn sightings(view: &SessionView) -> Vec<String> {
    phases(view, &|_| None)
        .into_iter()
        .filter_map(|p| p.sighting)
        .collect()
}

/// What resume `k` (from 1) must print: the note of phase `k - 1`, with
/// the blob matching its checksum.
pub(crate) fn expected_sighting(note: &str) -> String {
    format!("saw ok {note}")
}

/// The file each phase writes its note to (see the workload's scripts).
pub(crate) const NOTE_FILE: &str = "note.txt";

/// What a resume prints in a workspace no suspend ever stored.
const EMPTY_WORKSPACE: &str = "saw BAD";

/// Resume `k` must find the workspace of the last completed suspend
/// before it; or that of a later suspend that did not complete (its
/// snapshot may have been stored, its release lost); with no completed
/// suspend before it, nothing (or such a later one).
fn resumes(history: &History, s: &SessionHistory, found: &mut Vec<Violation>) {
    let id = &s.view.session_id;
    let phases = phases(&s.view, &|addr| history.acceptor_of_addr(addr));
    for (k, phase) in phases.iter().enumerate().skip(1) {
        let Some(saw) = &phase.sighting else { continue };
        let Some(_) = s.notes.get(k) else {
            found.push(violation(
                "resume_saw_wrong_workspace",
                Some(id),
                None,
                format!(
                    "resume {k} ran, but only {} phases were started",
                    s.notes.len()
                ),
            ));
            continue;
        };
        let last_completed = (0..k).rev().find(|j| phases[*j].suspend_completed);
        // A completed suspend that did not store its phase's note stored
        // what its sandbox started from: back to one that did.
        let last_stored = (0..k)
            .rev()
            .find(|j| phases[*j].suspend_completed && phases[*j].note_stored);
        let mut allowed: Vec<String> = (last_stored.unwrap_or(0)..k)
            .filter_map(|j| s.notes.get(j).map(|n| expected_sighting(n)))
            .collect();
        if last_stored.is_none() {
            allowed.push(EMPTY_WORKSPACE.to_owned());
        }
        if !allowed.contains(saw) {
            let held = last_completed.map_or("an empty workspace".to_owned(), |j| {
                format!("{:?} (phase {j})", expected_sighting(&s.notes[j]))
            });
            found.push(violation(
                "resume_saw_wrong_workspace",
                Some(id),
                None,
                format!("resume {k} saw {saw:?}; the last completed suspend held {held}"),
            ));
        }
    }
}

/// Resumes that found an empty workspace because no suspend before them
/// completed (the suspending host was cut off or down until its claim
/// lapsed): allowed, but a workspace lost, so counted in the report.
pub(crate) fn resumes_from_nothing(s: &SessionHistory) -> usize {
    phases(&s.view, &|_| None)
        .iter()
        .skip(1)
        .filter(|p| p.sighting.as_deref() == Some(EMPTY_WORKSPACE))
        .count()
}

/// Who holds the session's claim just before `at`, and since its last
/// grant (claim or renewal).
fn holder_at(view: &SessionView, at: i64) -> Option<(String, i64)> {
    let mut holder: Option<(String, i64)> = None;
    for e in view.transcript.iter().filter(|e| e.at_ms < at) {
        match e.kind.as_str() {
            "claimed" | "renewed" => {
                holder = detail_str(e, "acceptor_id").map(|a| (a.to_owned(), e.at_ms));
            }
            "released" | "claim_expired" | "entry_removed" => holder = None,
            _ => {}
        }
    }
    holder
}

/// When the host is back and can reach the fleet API after `from`: past
/// every fault on it (or fleet-wide) in force then, or starting before
/// the host had its renewal margin to settle (a cut that begins while a
/// restarted Garrison is still starting leaves it nothing to renew with).
fn back_at(history: &History, host: usize, from: i64) -> i64 {
    let settle = history.renew_margin_ms + GRACE_MS;
    let mut back = from;
    loop {
        let later = history
            .faults
            .iter()
            .filter(|f| f.affects(host) && f.start_ms <= back + settle)
            .map(|f| f.end_or(history.end_ms))
            .filter(|end| *end > back)
            .max();
        match later {
            Some(end) => back = end,
            None => return back,
        }
    }
}

/// A claim held by a host that was killed or paused past the claim's
/// deadline must be renewed, released or lost within a renewal margin of
/// the host being back (or of the deadline, if later).
fn claims(history: &History, s: &SessionHistory, found: &mut Vec<Violation>) {
    let id = &s.view.session_id;
    for f in history.faults.iter().filter(|f| f.kind.stops_acceptor()) {
        let Some(host) = f.host else { continue };
        let acceptor = &history.hosts[host].acceptor;
        let Some((holder, granted)) = holder_at(&s.view, f.start_ms) else {
            continue;
        };
        if holder != *acceptor {
            continue;
        }
        let deadline = granted + history.claim_ttl_ms;
        let down_end = f.end_or(history.end_ms);
        if deadline >= down_end {
            continue;
        }
        let limit =
            deadline.max(back_at(history, host, down_end)) + history.renew_margin_ms + GRACE_MS;
        if limit > history.end_ms {
            continue;
        }
        let settled = s.view.transcript.iter().any(|e| {
            e.at_ms > f.start_ms
                && e.at_ms <= limit
                && matches!(
                    e.kind.as_str(),
                    "claimed" | "renewed" | "released" | "claim_expired" | "entry_removed"
                )
        });
        if !settled {
            found.push(violation(
                "claim_held_past_deadline",
                Some(id),
                Some(host),
                format!(
                    "{acceptor} held the claim granted at {granted} (deadline {deadline}) through \
                     its {} until {down_end}, and neither renewed nor released it by {limit}",
                    f.kind.name()
                ),
            ));
        }
    }
}

fn unfinished(s: &SessionHistory, found: &mut Vec<Violation>) {
    let v = &s.view;
    let released = v
        .entry
        .as_ref()
        .is_none_or(|e| e.status.phase != Phase::Claimed);
    if v.session_status != SessionStatus::Terminated || !released {
        found.push(violation(
            "sessions_unfinished",
            Some(&v.session_id),
            None,
            format!(
                "{} and {} at the end",
                v.session_status,
                if released {
                    "unclaimed"
                } else {
                    "still claimed"
                }
            ),
        ));
    }
}

/// The sandbox names the session's remotes ran in (from their `hello`).
fn sandbox_names(view: &SessionView) -> Vec<&str> {
    view.events("hello")
        .filter_map(|e| detail_str(e, "cwd"))
        .filter_map(|cwd| cwd.split("/sandboxes/").nth(1)?.split('/').next())
        .collect()
}

/// Everything left at the end but the snapshots kept by design (see
/// `kept.rs`), which the report counts apart.
fn leftovers(history: &History, found: &mut Vec<Violation>) {
    for left in &history.leftovers {
        if kept_for_retention(history, left) {
            continue;
        }
        let session = history
            .sessions
            .iter()
            .find(|s| {
                left.path.contains(&s.view.session_id)
                    || sandbox_names(&s.view).iter().any(|n| left.path.contains(n))
            })
            .map(|s| s.view.session_id.as_str());
        found.push(violation(
            "leftovers_after_end",
            session,
            left.host,
            format!("left behind: {}", left.path),
        ));
    }
}

/// Whether the host was seen ready at some moment within `[from, to]`.
fn ready_within(readiness: &[(i64, bool)], from: i64, to: i64) -> bool {
    let before = readiness.iter().rev().find(|(at, _)| *at <= from);
    before.is_some_and(|(_, ready)| *ready)
        || readiness
            .iter()
            .any(|(at, ready)| *ready && *at > from && *at <= to)
}

/// After the last fault touching a host heals (none other in force, none
/// starting within the bound), the host is ready again within the bound.
fn readiness(history: &History, found: &mut Vec<Violation>) {
    let within = history.ready_within_ms;
    for (n, host) in history.hosts.iter().enumerate() {
        let touching: Vec<_> = history.faults.iter().filter(|f| f.affects(n)).collect();
        for f in &touching {
            let Some(healed) = f.end_ms else { continue };
            let until = healed + within;
            let covered = touching.iter().any(|o| {
                !std::ptr::eq(*o, *f) && o.start_ms <= until && o.end_or(history.end_ms) > healed
            });
            if covered || ready_within(&host.readiness, healed, until.min(history.end_ms)) {
                continue;
            }
            // Not ready, but the run ended before the bound did.
            if until <= history.end_ms {
                found.push(violation(
                    "not_ready_after_heal",
                    None,
                    Some(n),
                    format!(
                        "{} not ready within {} s of its {} healing at {healed}",
                        host.acceptor,
                        within / 1000,
                        f.kind.name()
                    ),
                ));
            }
        }
    }
}

fn exits(history: &History, found: &mut Vec<Violation>) {
    for (n, host) in history.hosts.iter().enumerate() {
        for exit in &host.exits {
            found.push(violation(
                "unexpected_exit",
                None,
                Some(n),
                format!("{} exited at {}: {}", host.acceptor, exit.at_ms, exit.what),
            ));
        }
    }
}

/// Kinds in report order, with how many of each were injected (every kind
/// present).
pub(crate) fn fault_counts(history: &History) -> BTreeMap<&'static str, usize> {
    let mut counts: BTreeMap<&'static str, usize> =
        FaultKind::ALL.iter().map(|k| (k.name(), 0)).collect();
    for f in &history.faults {
        *counts.entry(f.kind.name()).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests;
