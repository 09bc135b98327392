//! Claims as the reference server grants them: short lifetimes in whole
//! seconds, and some answers without a deadline. Sessions must still
//! start, run and end exactly once, with a bounded number of claims.

use std::time::Duration;

use crate::common::*;
use emulator::{Emulator, Faults, Then};
use fleet::SessionStatus;
use orchestrator::{Finish, Stage};

/// Far above what pacing allows over these sessions' lives (a renewal at
/// half of each 6 s claim is a handful), far below a re-claim loop.
const MAX_CLAIMS_PER_SESSION: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_whole_second_claims_without_deadlines_serve_each_session_once() {
    let emu = emulator_with(|c| {
        c.claim_ttl = Duration::from_secs(6);
        c.faults = Faults {
            claim_deadline_missing_rate: 0.3,
            whole_second_timestamps: true,
            ..Faults::default()
        };
    })
    .await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );

    // Each session outlives its first claims several times over.
    let ids = sessions_running(&emu, &outpost, 3, "sleep 8 &&");
    each_served_once(&emu, &g, &ids).await;
}

/// Issue 13's bar: against the emulator in its strictest mode (every watch
/// event possibly twice, whole-second 20 s claims, one claim answer in ten
/// without a deadline, null platforms), 50 sessions are each served exactly
/// once. Each runs longer than a claim lives, so every one is renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strictest_emulator_gets_fifty_sessions_served_exactly_once() {
    const SESSIONS: usize = 50;
    let emu = emulator_with(|c| {
        c.claim_ttl = Duration::from_secs(20);
        c.faults = Faults {
            duplicate_event_rate: 0.5,
            claim_deadline_missing_rate: 0.1,
            whole_second_timestamps: true,
            null_platform: true,
            // As Cognition's model of the server: no event for a release.
            silent_release: true,
            ..Faults::default()
        };
    })
    .await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--max-concurrent".into(), SESSIONS.to_string()],
        },
    );

    let ids = sessions_running(&emu, &outpost, SESSIONS, "sleep 25 &&");
    each_served_once(&emu, &g, &ids).await;
    for id in &ids {
        let v = view(&emu, id);
        assert!(
            v.events("renewed").count() >= 1,
            "{id}: outlived its first claim unrenewed: {:?}\n--- garrison log ---\n{}",
            v.transcript,
            g.log()
        );
    }
}

/// `count` sessions, the n-th running `<before> echo served-<n>` and then
/// ending.
fn sessions_running(emu: &Emulator, outpost: &str, count: usize, before: &str) -> Vec<String> {
    (0..count)
        .map(|n| {
            session(
                emu,
                outpost,
                vec![run(&format!("{before} echo served-{n}"))],
                Then::End,
            )
        })
        .collect()
}

/// Waits for every session of [`sessions_running`] to end, then checks each
/// connected one remote, ran its step once and took a bounded number of
/// claim requests.
async fn each_served_once(emu: &Emulator, g: &Garrison, ids: &[String]) {
    // Not "released": when even the first answers of the run had no
    // deadline, the assumed 5 minutes let a short claim lapse (a running
    // session stays with its worker), and a lapsed claim has nothing left
    // to release.
    for id in ids {
        wait_until("terminated and recorded as ended", Some(g), || {
            status_is(emu, id, SessionStatus::Terminated)
                && g.store().session(&sid(id)).unwrap().map(|r| r.stage)
                    == Some(Stage::Done(Finish::Terminated))
        })
        .await;
    }
    for (n, id) in ids.iter().enumerate() {
        let v = view(emu, id);
        assert_eq!(v.connections, 1, "{id}: exactly one remote connected");
        assert_eq!(v.events("duplicate_connection").count(), 0, "{id}");
        let outputs: Vec<String> = step_outputs(emu, id)
            .iter()
            .map(|o| o.trim().to_owned())
            .collect();
        assert_eq!(outputs, vec![format!("served-{n}")], "{id}: ran once");
        let claims = v.events("claimed").count() + v.events("renewed").count();
        assert!(
            claims <= MAX_CLAIMS_PER_SESSION,
            "{id}: {claims} claim requests\n--- garrison log ---\n{}",
            g.log()
        );
    }
}
