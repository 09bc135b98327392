//! `garrison serve` when a session leaves the fleet API before its final
//! status is read: the workspace is kept as a recovery snapshot before the
//! sandbox goes, and the session's events say why.

use std::time::Duration;

use crate::common::*;
use emulator::Then;
use orchestrator::{Finish, SnapshotReason, Stage};

/// Waits for the session to be done as `vanished`, then checks what it
/// left: one recovery snapshot holding `marker`, stored before the sandbox
/// was destroyed, and the event that says why.
async fn kept_for_recovery(g: &Garrison, state: &std::path::Path, id: &str, marker: &str) {
    wait_until("the session is done as vanished", Some(g), || {
        g.store()
            .session(&sid(id))
            .unwrap()
            .is_some_and(|s| s.stage == Stage::Done(Finish::Vanished))
    })
    .await;
    let snapshots = g.store().snapshots(&sid(id)).unwrap();
    assert_eq!(snapshots.len(), 1, "{id}: one snapshot\n{}", g.log());
    assert_eq!(snapshots[0].reason, SnapshotReason::Recovery, "{id}");
    assert!(
        !grep_tree(&state.join("snapshots"), marker.as_bytes()).is_empty(),
        "{id}: the snapshot holds the workspace"
    );

    let events = g.store().events(&sid(id), 0).unwrap();
    let at = |kind: &str| {
        events
            .iter()
            .position(|e| e.kind == kind)
            .unwrap_or_else(|| panic!("{id}: no {kind} event in {events:#?}"))
    };
    let why = &events[at("final_status_unknown")];
    let reason = why.detail["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("gone from the fleet API (404)")
            && reason.contains("no final status arrived")
            && reason.contains("recovery snapshot"),
        "{id}: {reason}"
    );
    assert!(
        at("final_status_unknown") < at("snapshot") && at("snapshot") < at("sandbox_destroyed"),
        "{id}: said why, then the snapshot stored, then the sandbox gone: {events:#?}"
    );
    assert_eq!(
        events[at("snapshot")].detail["reason"],
        "recovery",
        "{id}: {events:#?}"
    );
}

/// One session's entry is removed while its remote runs; another's after
/// its remote exited by itself while its final status still lagged (so
/// only a 404 answers the reads that would confirm it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_gone_from_the_fleet_api_keeps_a_recovery_snapshot() {
    let emu = emulator_with(|c| c.status_lag = Duration::from_secs(600)).await;
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

    let running = session(
        &emu,
        &outpost,
        vec![write("work.txt", "kept-while-running-5e1f")],
        Then::Wait,
    );
    wait_until("the first remote did its work", Some(&g), || {
        view(&emu, &running).steps_done == 1
    })
    .await;
    emu.remove_entry(&running);
    kept_for_recovery(&g, &state, &running, "kept-while-running-5e1f").await;

    let exited = session(
        &emu,
        &outpost,
        vec![write("work.txt", "kept-after-exit-a93d")],
        Then::End,
    );
    wait_until("the second remote exited by itself", Some(&g), || {
        let v = view(&emu, &exited);
        v.steps_done == 1 && v.connections == 1 && !v.connected
    })
    .await;
    emu.remove_entry(&exited);
    kept_for_recovery(&g, &state, &exited, "kept-after-exit-a93d").await;

    // Both sandboxes went (after their snapshots), and nothing deleted the
    // snapshots as an ended session's.
    wait_until("both sandboxes gone", Some(&g), || {
        sandbox_dirs(&state) == 0
    })
    .await;
    for id in [&running, &exited] {
        assert_eq!(g.store().snapshots(&sid(id)).unwrap().len(), 1, "{id}");
        assert_eq!(
            view(&emu, id).events("released").count(),
            0,
            "{id}: nothing to give back"
        );
    }
}
