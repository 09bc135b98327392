//! `garrison serve` against a passing `suspended` read after the remote's
//! clean exit, while the final status still lags it: the cause of the
//! fault-profile test's "served more than once" (see `serve_e2e.rs`).
//!
//! The remote exits 0 when Devin ends the session; the status reads
//! `running` for a few seconds more, and a live session can read
//! `suspended` for a moment. Wound down on that one read, the session was
//! snapshotted and its claim released while it still read `running`, so
//! the next re-list found a pending, running row and claimed it again: a
//! second remote connected to a session that was ending.

use std::time::Duration;

use crate::common::*;
use emulator::{Faults, Then};
use fleet::SessionStatus;
use orchestrator::{Finish, Stage};

/// Reads of the session's entry by id (the confirming reads) so far.
fn entry_reads(emu: &emulator::Emulator) -> u64 {
    emu.request_counts()
        .get("GET /opbeta/outposts/devins/{id}")
        .copied()
        .unwrap_or(0)
}

fn set_transient_suspended(emu: &emulator::Emulator, rate: f64) {
    emu.set_faults(Faults {
        transient_suspended_rate: rate,
        ..emu.faults()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_suspended_after_the_remote_exits_does_not_end_the_session() {
    // Long enough a lag for a second remote to connect while the status
    // still reads `running`, short enough for the confirm reads to see the
    // end; no watch event for a release, as in the fault profile.
    let emu = emulator_with(|c| {
        c.status_lag = Duration::from_secs(8);
        c.faults.silent_release = true;
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
            extra_args: vec!["--relist-interval-secs".into(), "1".into()],
        },
    );
    let id = session(&emu, &outpost, vec![run("echo once")], Then::End);
    wait_until("the remote exited by itself", Some(&g), || {
        let v = view(&emu, &id);
        v.steps_done == 1 && v.connections == 1 && !v.connected
    })
    .await;
    let stage = || g.store().session(&sid(&id)).unwrap().map(|s| s.stage);

    // Every read says `suspended` until Garrison has read the entry again
    // twice, or has acted on what it read; then none does.
    let before = entry_reads(&emu);
    set_transient_suspended(&emu, 1.0);
    wait_until("a confirming read", Some(&g), || entry_reads(&emu) > before).await;
    wait_until("a second read, or a wind-down", Some(&g), || {
        entry_reads(&emu) > before + 1 || stage() != Some(Stage::Running)
    })
    .await;
    set_transient_suspended(&emu, 0.0);

    wait_until("terminated, released and done here", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated)
            && released(&emu, &id)
            && stage().is_some_and(|s| s.is_done())
    })
    .await;
    let v = view(&emu, &id);
    assert_eq!(
        v.connections,
        1,
        "served more than once\n--- transcript ---\n{:#?}\n--- garrison log ---\n{}",
        v.transcript,
        g.log()
    );
    assert_eq!(v.events("claimed").count(), 1, "claimed again");
    assert_eq!(stage(), Some(Stage::Done(Finish::Terminated)));
    assert!(
        g.store().snapshots(&sid(&id)).unwrap().is_empty(),
        "an ended session keeps no snapshot"
    );
}
