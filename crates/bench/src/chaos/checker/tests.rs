//! Hand-built histories, each with one breach (or a near miss that is
//! not one).

use emulator::{SessionView, TranscriptEvent};
use fleet::SessionStatus;
use serde_json::{Value, json};

use super::*;
use crate::chaos::history::{Exit, FaultRecord, HostHistory, Leftover};

fn ev(at_ms: i64, kind: &str, detail: Value) -> TranscriptEvent {
    TranscriptEvent {
        at_ms,
        kind: kind.into(),
        detail,
    }
}

fn view(id: &str, status: SessionStatus, transcript: Vec<TranscriptEvent>) -> SessionView {
    SessionView {
        session_id: id.into(),
        outpost_id: "op".into(),
        entry: None,
        session_status: status,
        connections: 1,
        connected: false,
        steps_done: 0,
        transcript,
    }
}

fn session(transcript: Vec<TranscriptEvent>) -> SessionHistory {
    SessionHistory {
        view: view("devin-a", SessionStatus::Terminated, transcript),
        notes: Vec::new(),
    }
}

fn host(n: usize) -> HostHistory {
    HostHistory {
        acceptor: format!("host-{n}"),
        addr: format!("10.0.0.{n}"),
        readiness: vec![(0, true)],
        exits: Vec::new(),
    }
}

fn history() -> History {
    History {
        claim_ttl_ms: 10_000,
        renew_margin_ms: 5_000,
        ready_within_ms: 60_000,
        end_ms: 1_000_000,
        faults: Vec::new(),
        hosts: (0..3).map(host).collect(),
        sessions: Vec::new(),
        leftovers: Vec::new(),
        final_status_unknown: Default::default(),
    }
}

fn fault(kind: FaultKind, host: Option<usize>, start_ms: i64, end_ms: i64) -> FaultRecord {
    FaultRecord {
        kind,
        host,
        start_ms,
        end_ms: Some(end_ms),
    }
}

fn only(found: &[Violation]) -> Vec<&'static str> {
    found.iter().map(|v| v.invariant).collect()
}

fn claimed(at: i64, who: &str) -> TranscriptEvent {
    ev(at, "claimed", json!({"acceptor_id": who}))
}

fn connected(at: i64, conn: u64, peer: &str) -> TranscriptEvent {
    ev(at, "connected", json!({"conn": conn, "peer": peer}))
}

fn duplicate(at: i64, holder: u64, peer: &str) -> TranscriptEvent {
    ev(
        at,
        "duplicate_connection",
        json!({"connected": holder, "conn": 9, "peer": peer}),
    )
}

#[test]
fn a_clean_history_has_no_violation_and_every_invariant_is_counted() {
    let mut h = history();
    h.sessions.push(session(vec![
        claimed(1_000, "host-0"),
        connected(2_000, 1, "10.0.0.0"),
        ev(9_000, "released", json!({"acceptor_id": "host-0"})),
    ]));
    let found = check(&h);
    assert!(found.is_empty(), "{found:?}");
    let counts = counts(&found);
    assert_eq!(counts.len(), INVARIANTS.len());
    assert!(counts.values().all(|n| *n == 0));
}

#[test]
fn a_second_remote_from_another_host_is_two_live_remotes() {
    let mut h = history();
    h.sessions.push(session(vec![
        connected(2_000, 1, "10.0.0.0"),
        duplicate(3_000, 1, "10.0.0.1"),
    ]));
    let found = check(&h);
    assert_eq!(only(&found), ["two_live_remotes"]);
    assert_eq!(found[0].host, Some(1));
    assert_eq!(counts(&found)["two_live_remotes"], 1);
}

#[test]
fn a_remote_redialling_after_its_hosts_cut_is_not_a_second_remote() {
    let mut h = history();
    h.faults
        .push(fault(FaultKind::CutFleet, Some(0), 2_500, 20_000));
    h.sessions.push(session(vec![
        connected(2_000, 1, "10.0.0.0"),
        duplicate(21_000, 1, "10.0.0.0"),
    ]));
    assert!(check(&h).is_empty());
    // The same host without a cut: its Garrison started a second remote.
    h.faults.clear();
    assert_eq!(only(&check(&h)), ["two_live_remotes"]);
}

/// A sleeper's transcript: per phase, its look's output (`None`: phase
/// 0, which makes the workspace) and whether its suspend completed.
fn sleeper(notes: &[&str], phases: &[(Option<&str>, bool)]) -> SessionHistory {
    let mut t = Vec::new();
    let mut at = 1_000;
    let mut next = |t: &mut Vec<TranscriptEvent>, kind: &str, detail: Value| {
        at += 10;
        t.push(ev(at, kind, detail));
    };
    for (k, (look, completed)) in phases.iter().enumerate() {
        if k > 0 {
            next(&mut t, "resumed", json!({}));
        }
        next(&mut t, "claimed", json!({"acceptor_id": "host-0"}));
        next(&mut t, "connected", json!({"conn": k, "peer": "10.0.0.0"}));
        if let Some(out) = look {
            let output = format!("cat: note.txt: No such file\n{out}\n");
            next(&mut t, "step", json!({"command": "look", "output": output}));
        }
        next(&mut t, "step", json!({"path": "note.txt", "output": ""}));
        next(&mut t, "status", json!({"to": "suspended"}));
        if *completed {
            next(&mut t, "released", json!({"acceptor_id": "host-0"}));
        } else {
            // The server's claim lapses; another host claims the row and
            // gives it back, storing nothing.
            next(&mut t, "claim_expired", json!({"acceptor_id": "host-0"}));
            next(&mut t, "claimed", json!({"acceptor_id": "host-1"}));
            next(&mut t, "released", json!({"acceptor_id": "host-1"}));
        }
    }
    SessionHistory {
        view: view("devin-s", SessionStatus::Terminated, t),
        notes: notes.iter().map(|n| n.to_string()).collect(),
    }
}

#[test]
fn every_resume_must_see_the_last_suspends_workspace() {
    let notes = ["n0", "n1", "n2"];
    let mut h = history();
    h.sessions.push(sleeper(
        &notes,
        &[
            (None, true),
            (Some("saw ok n0"), true),
            (Some("saw ok n1"), true),
        ],
    ));
    assert!(check(&h).is_empty(), "{:?}", check(&h));

    let mut h = history();
    h.sessions.push(sleeper(
        &notes,
        &[
            (None, true),
            (Some("saw ok n0"), true),
            (Some("saw ok n0"), true),
        ],
    ));
    let found = check(&h);
    assert_eq!(only(&found), ["resume_saw_wrong_workspace"]);
    assert_eq!(found[0].session.as_deref(), Some("devin-s"));

    let mut h = history();
    h.sessions
        .push(sleeper(&notes, &[(None, true), (Some("saw BAD"), true)]));
    assert_eq!(only(&check(&h)), ["resume_saw_wrong_workspace"]);
}

#[test]
fn after_a_suspend_that_never_completed_the_last_completed_one_counts() {
    let notes = ["n0", "n1", "n2", "n3"];
    // Phase 1's suspend lapsed: resume 2 may find phase 0's or phase 1's
    // workspace, nothing else.
    for (saw, ok) in [("saw ok n1", true), ("saw ok n0", true), ("saw BAD", false)] {
        let mut h = history();
        h.sessions.push(sleeper(
            &notes,
            &[(None, true), (Some("saw ok n0"), false), (Some(saw), true)],
        ));
        assert_eq!(check(&h).is_empty(), ok, "{saw}: {:?}", check(&h));
    }
    // No suspend completed at all: an empty workspace is what there is,
    // counted apart.
    let mut h = history();
    h.sessions
        .push(sleeper(&notes, &[(None, false), (Some("saw BAD"), true)]));
    assert!(check(&h).is_empty());
    assert_eq!(resumes_from_nothing(&h.sessions[0]), 1);
    // But a workspace older than the last completed suspend never is.
    let mut h = history();
    h.sessions.push(sleeper(
        &notes,
        &[
            (None, false),
            (Some("saw BAD"), true),
            (Some("saw ok n1"), false),
            (Some("saw ok n0"), true),
        ],
    ));
    assert_eq!(only(&check(&h)), ["resume_saw_wrong_workspace"]);
}

// Bench chaos, seed 1608675262: a host served a phase's note write and
// lost its claim while cut off; another claimed the session, restored the
// workspace of the suspend before, and completed the phase's suspend. The
// next resume found that older note: the workspace stored last.
#[test]
fn a_suspend_completed_in_another_sandbox_than_the_note_was_written_in_stores_what_it_started_from()
{
    // Phase 2: host 0 served the look and the note write, host 1 completed
    // the suspend.
    check_third_resume(&[
        ("claimed", json!({"acceptor_id": "host-0"})),
        ("connected", json!({"conn": 5, "peer": "10.0.0.0"})),
        ("step", json!({"command": "look", "output": "saw ok n1\n"})),
        ("step", json!({"path": "note.txt", "output": ""})),
        ("claim_expired", json!({"acceptor_id": "host-0"})),
        ("claimed", json!({"acceptor_id": "host-1"})),
        ("connected", json!({"conn": 6, "peer": "10.0.0.1"})),
    ]);
}

// Bench chaos, seed 3210005263 (the suite beside a CPU hog): host 2's
// claim lapsed; host 1 claimed the session; then host 2's remote dialled
// in and wrote the phase's note in host 2's sandbox before host 2 stopped
// it; host 1's remote went on from the next step and host 1 completed the
// suspend, storing what its sandbox started from. The checker took the
// note for host 1's (the claim's holder when the remote connected) and
// wanted the next resume to see it.
#[test]
fn a_note_written_by_a_remote_of_a_host_that_lost_the_claim_is_not_stored() {
    check_third_resume(&[
        ("claimed", json!({"acceptor_id": "host-2"})),
        ("claim_expired", json!({"acceptor_id": "host-2"})),
        ("claimed", json!({"acceptor_id": "host-1"})),
        ("connected", json!({"conn": 5, "peer": "10.0.0.2"})),
        ("step", json!({"command": "look", "output": "saw ok n1\n"})),
        ("step", json!({"path": "note.txt", "output": ""})),
        ("disconnected", json!({})),
        ("connected", json!({"conn": 6, "peer": "10.0.0.1"})),
    ]);
}

/// A sleeper whose phases 0 and 1 went well, whose phase 2 went as
/// `phase_two` says until host 1 completed its suspend (the note written
/// elsewhere), and whose third resume, on host 2, saw n1 (what host 1's
/// sandbox started from and stored: kept), n2 (the note of a suspend that
/// may have been stored: kept) or n0 (older than the last stored: a
/// violation).
fn check_third_resume(phase_two: &[(&str, Value)]) {
    let notes = ["n0", "n1", "n2"];
    let mut h = history();
    h.sessions
        .push(sleeper(&notes, &[(None, true), (Some("saw ok n0"), true)]));
    let mut t = h.sessions[0].view.transcript.clone();
    let mut at = t.last().unwrap().at_ms;
    let mut next = |kind: &str, detail: Value| {
        at += 10;
        t.push(ev(at, kind, detail));
    };
    next("resumed", json!({}));
    for (kind, detail) in phase_two {
        next(kind, detail.clone());
    }
    next("status", json!({"to": "suspended"}));
    next("released", json!({"acceptor_id": "host-1"}));
    next("resumed", json!({}));
    next("claimed", json!({"acceptor_id": "host-2"}));
    next("connected", json!({"conn": 7, "peer": "10.0.0.2"}));
    let look_at = t.len();
    let look = |saw: &str| ev(at + 10, "step", json!({"command": "look", "output": saw}));
    let mut notes = notes.map(str::to_owned).to_vec();
    notes.push("n3".into());
    for (saw, ok) in [
        ("saw ok n1", true),
        ("saw ok n2", true),
        ("saw ok n0", false),
    ] {
        let mut t = t.clone();
        t.insert(look_at, look(saw));
        let mut h = history();
        h.sessions.push(SessionHistory {
            view: view("devin-s", SessionStatus::Terminated, t),
            notes: notes.clone(),
        });
        assert_eq!(check(&h).is_empty(), ok, "{saw}: {:?}", check(&h));
    }
}

#[test]
fn a_paused_acceptor_must_settle_its_expired_claim_once_back() {
    let mut h = history();
    // Claimed at 1 s (deadline 11 s); paused 2 s..20 s; the margin is 5 s
    // and the grace 5 s, so it has until 30 s.
    h.faults
        .push(fault(FaultKind::Pause, Some(0), 2_000, 20_000));
    h.sessions.push(session(vec![
        claimed(1_000, "host-0"),
        ev(40_000, "renewed", json!({"acceptor_id": "host-0"})),
    ]));
    let found = check(&h);
    assert_eq!(only(&found), ["claim_held_past_deadline"]);
    assert_eq!(found[0].host, Some(0));

    // Renewed soon after waking: fine.
    h.sessions[0].view.transcript[1].at_ms = 21_000;
    assert!(check(&h).is_empty());

    // Still cut from the fleet after waking: the bound starts at the heal.
    h.sessions[0].view.transcript[1].at_ms = 40_000;
    h.faults
        .push(fault(FaultKind::ApiErrors, None, 15_000, 35_000));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
}

// Bench chaos, seed 10019065126789602965: a Garrison restarted after a
// kill was cut off from the fleet API a moment later, and could renew
// only once the cut healed.
#[test]
fn a_cut_that_begins_before_a_restarted_acceptor_could_renew_moves_its_bound() {
    let mut h = history();
    h.faults
        .push(fault(FaultKind::KillRestart, Some(0), 2_000, 20_000));
    h.faults
        .push(fault(FaultKind::CutBoth, Some(0), 21_000, 36_000));
    h.sessions.push(session(vec![
        claimed(1_000, "host-0"),
        ev(38_000, "renewed", json!({"acceptor_id": "host-0"})),
    ]));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
    // A cut that begins once the margin has passed does not excuse it.
    h.faults[1].start_ms = 31_000;
    assert_eq!(only(&check(&h)), ["claim_held_past_deadline"]);
}

#[test]
fn a_claim_whose_deadline_outlasts_the_pause_is_not_checked() {
    let mut h = history();
    h.faults
        .push(fault(FaultKind::KillRestart, Some(1), 2_000, 4_000));
    h.sessions.push(session(vec![
        claimed(1_000, "host-1"),
        ev(50_000, "renewed", json!({"acceptor_id": "host-1"})),
    ]));
    assert!(check(&h).is_empty());
}

#[test]
fn leftovers_name_their_session() {
    let mut h = history();
    h.sessions.push(session(Vec::new()));
    h.sessions[0].view.transcript.push(ev(
        5,
        "hello",
        json!({"cwd": "/s/host/sandboxes/garrison-abc/fs/workspace"}),
    ));
    h.leftovers.push(Leftover {
        host: None,
        path: "garrison/host/garrison-abc-17-x.tar.zst".into(),
    });
    let found = check(&h);
    assert_eq!(only(&found), ["leftovers_after_end"]);
    assert_eq!(found[0].session.as_deref(), Some("devin-a"));
}

// A session whose final status a host could never read keeps a Recovery
// snapshot for the retention period by design: its archive and manifest
// are not leftovers; anything else of it (a lease, a sandbox) still is,
// and so are the snapshots of a session with no such event.
#[test]
fn snapshots_of_a_session_whose_final_status_was_unknown_are_kept() {
    let mut h = history();
    h.sessions.push(session(Vec::new()));
    let kept = sandbox::SandboxName::for_session("devin-a");
    let other = sandbox::SandboxName::for_session("devin-b");
    for path in [
        format!("garrison/host/{kept}-17-x.tar.zst"),
        format!("garrison/host/{kept}-17-x.json"),
        format!("garrison/host/leases/{kept}-17-x/reader"),
        format!("garrison/host/{other}-18-y.tar.zst"),
    ] {
        h.leftovers.push(Leftover { host: None, path });
    }
    h.leftovers.push(Leftover {
        host: Some(1),
        path: format!("/s/snapshots/{kept}-19-z.tar.zst"),
    });
    assert_eq!(check(&h).len(), 5);

    h.final_status_unknown.insert("devin-a".into());
    let found = check(&h);
    let left: Vec<&str> = found.iter().map(|v| v.message.as_str()).collect();
    assert_eq!(found.len(), 3, "{left:?}");
    assert!(
        left.iter()
            .all(|m| !m.ends_with("-17-x.tar.zst") && !m.ends_with("-17-x.json"))
    );
    assert_eq!(crate::chaos::kept::kept_count(&h), 2);
}

#[test]
fn a_host_must_be_ready_within_the_bound_after_its_last_heal() {
    let mut h = history();
    h.faults
        .push(fault(FaultKind::DiskFull, Some(2), 10_000, 20_000));
    h.hosts[2].readiness = vec![(0, true), (11_000, false), (90_000, true)];
    let found = check(&h);
    assert_eq!(only(&found), ["not_ready_after_heal"]);
    assert_eq!(found[0].host, Some(2));

    h.hosts[2].readiness = vec![(0, true), (11_000, false), (30_000, true)];
    assert!(check(&h).is_empty());

    // A later fault on the host within the bound: that one's heal counts.
    h.hosts[2].readiness = vec![(0, true), (11_000, false), (100_000, true)];
    h.faults
        .push(fault(FaultKind::Pause, Some(2), 50_000, 70_000));
    assert!(check(&h).is_empty(), "{:?}", check(&h));
}

#[test]
fn exits_and_unfinished_sessions_are_violations() {
    let mut h = history();
    h.hosts[1].exits.push(Exit {
        at_ms: 5_000,
        what: "exit status: 1".into(),
    });
    h.sessions.push(SessionHistory {
        view: view("devin-u", SessionStatus::Running, Vec::new()),
        notes: Vec::new(),
    });
    let mut found = only(&check(&h));
    found.sort();
    assert_eq!(found, ["sessions_unfinished", "unexpected_exit"]);
}

#[test]
fn fault_counts_list_every_kind() {
    let mut h = history();
    h.faults.push(fault(FaultKind::CutStore, Some(0), 1, 2));
    h.faults.push(fault(FaultKind::CutStore, Some(1), 1, 2));
    let counts = fault_counts(&h);
    assert_eq!(counts.len(), FaultKind::ALL.len());
    assert_eq!(counts["cut_store"], 2);
    assert_eq!(counts["pause"], 0);
}
