//! What a wind-down leaves on this host: a sandbox no record names, and
//! the snapshots of a session this host lost that ended elsewhere.

use super::*;
use crate::store::{SnapshotReason, StoredSnapshot};

/// A snapshot of the session, recorded in the store as a recovery one (what
/// a host that lost the session keeps), its sandbox gone.
async fn recorded_snapshot(world: &World) -> sandbox::SnapshotRef {
    let handle = world.sandbox().await;
    let snapshot = world.backend.snapshot(&handle).await.unwrap();
    world.backend.destroy(&handle).await.unwrap();
    world
        .store
        .add_snapshot(&StoredSnapshot {
            session_id: fleet::SessionId::new(SESSION).unwrap(),
            reason: SnapshotReason::Recovery,
            snapshot: snapshot.clone(),
        })
        .unwrap();
    snapshot
}

/// `snapshot` is deleted, and no snapshot is recorded any more.
async fn assert_snapshot_gone(world: &World, snapshot: &sandbox::SnapshotRef) {
    assert!(!world.backend.snapshot_exists(snapshot).await.unwrap());
    assert!(
        world
            .store
            .snapshots_older_than(i64::MAX)
            .unwrap()
            .is_empty()
    );
}

/// The fleet API's answer to a GET of the session, in `status`.
fn entry_in(status: SessionStatus) -> serde_json::Value {
    let mut entry = claim_response();
    entry.status.session_status = status;
    entry.status.phase = Phase::Pending;
    entry.status.acceptor_id = None;
    entry.status.connect_token = None;
    serde_json::to_value(entry).unwrap()
}

// Before the fix the wind-down ended only the recorded sandbox: one made
// by a create whose record never got written (Garrison killed between the
// two) stayed on the host for good once the session was found terminated
// (bench chaos, `leftovers_after_end`).
#[tokio::test]
async fn a_sandbox_no_record_names_goes_when_the_session_ends() {
    let world = World::new().await;
    world.sandbox().await;
    let rec = record(Stage::Starting, None);
    world.store.put_session(&rec).unwrap();
    let mut runner = world.runner(rec);

    runner.wind_down(Finish::Terminated).await.unwrap();

    assert!(world.backend.list().await.unwrap().is_empty());
}

// Before the fix a create killed part way (bench chaos: SIGKILL of a
// Garrison) left a sandbox directory without a handle that no listing
// showed; when the session then ended elsewhere, nothing removed it
// (`leftovers_after_end`).
#[tokio::test]
async fn the_remains_of_a_create_killed_part_way_go_when_the_session_ends() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let dir = world.dir.path().join("host/sandboxes").join(&handle.name);
    std::fs::remove_file(dir.join("handle.json")).unwrap();
    assert!(
        world
            .backend
            .find(&sandbox::SandboxName::for_session(SESSION))
            .await
            .unwrap()
            .is_none()
    );
    world.answer_gets(200, entry_in(SessionStatus::Terminated));
    let mut runner = world.runner(record(Stage::Starting, None));

    runner.wind_down(Finish::Vanished).await.unwrap();

    assert!(!dir.exists(), "the remains are still there");
    let events = world
        .store
        .events(&fleet::SessionId::new(SESSION).unwrap(), 0)
        .unwrap();
    assert!(
        events.iter().any(|e| e.kind == "remains_removed"),
        "{events:?}"
    );
}

// Another Garrison's sandbox of the same name (a cloud account both use)
// is not this one's to destroy.
#[tokio::test]
async fn an_unrecorded_sandbox_another_garrison_made_is_left() {
    let world = World::new().await;
    let mut labels = sandbox::session_labels(SESSION, "o");
    labels.insert(sandbox::LABEL_ACCEPTOR_ID.into(), "them".into());
    world.sandbox_labelled(labels).await;
    let mut runner = world.runner(record(Stage::Starting, None));

    runner.wind_down(Finish::Terminated).await.unwrap();

    assert_eq!(world.backend.list().await.unwrap().len(), 1);
}

// Before the fix a host that lost its claim kept the session's snapshots
// as recovery ones for the whole retention period, though the session had
// ended with the acceptor that took it over.
#[tokio::test]
async fn a_lost_session_the_fleet_api_shows_terminated_loses_its_snapshots() {
    let world = World::new().await;
    let snapshot = recorded_snapshot(&world).await;
    world.answer_gets(200, entry_in(SessionStatus::Terminated));
    let mut runner = world.runner(record(Stage::Running, None));

    runner.wind_down(Finish::Vanished).await.unwrap();

    assert_snapshot_gone(&world, &snapshot).await;
    // Still not this host's claim to give back.
    assert_eq!(world.releases(), 0);
}

#[tokio::test]
async fn a_lost_session_not_known_to_be_over_keeps_its_snapshots() {
    for (status, body) in [
        (200, entry_in(SessionStatus::Suspended)),
        (404, serde_json::json!({"error": "not_found"})),
        (503, serde_json::json!({"error": "server_error"})),
    ] {
        let world = World::new().await;
        let snapshot = recorded_snapshot(&world).await;
        world.answer_gets(status, body);
        let mut runner = world.runner(record(Stage::Running, None));

        runner.wind_down(Finish::Vanished).await.unwrap();

        assert!(
            world.backend.snapshot_exists(&snapshot).await.unwrap(),
            "{status}"
        );
    }
}

/// The events of kind `kind` the session has.
fn events_of(world: &World, kind: &str) -> usize {
    world
        .store
        .events(&fleet::SessionId::new(SESSION).unwrap(), 0)
        .unwrap()
        .iter()
        .filter(|e| e.kind == kind)
        .count()
}

// Bench chaos (seed 20261202 beside a CPU hog): a host lost its claim while
// cut off, uploaded its recovery snapshot once the cut healed, and asked
// the fleet API after the session had ended elsewhere and left it: the
// snapshot stayed with no word of why, like a leftover.
#[tokio::test]
async fn a_lost_session_found_gone_says_its_final_status_is_unknown_once() {
    let world = World::new().await;
    let snapshot = recorded_snapshot(&world).await;
    world.answer_gets(404, serde_json::json!({"error": "not_found"}));
    let mut runner = world.runner(record(Stage::Running, None));

    runner.wind_down(Finish::Vanished).await.unwrap();
    runner.wind_down(Finish::Vanished).await.unwrap();

    assert!(world.backend.snapshot_exists(&snapshot).await.unwrap());
    assert_eq!(events_of(&world, "final_status_unknown"), 1);

    // Any other answer says nothing of the kind.
    let world = World::new().await;
    world.answer_gets(200, entry_in(SessionStatus::Suspended));
    let mut runner = world.runner(record(Stage::Running, None));
    runner.wind_down(Finish::Vanished).await.unwrap();
    assert_eq!(events_of(&world, "final_status_unknown"), 0);
}

// Before the fix a host cut off from the fleet API when it lost a session
// asked once whether it was over, got no answer, and kept the session's
// recovery snapshot for the whole retention period, though the session had
// ended elsewhere (bench chaos, `leftovers_after_end`). The minute's sweep
// asks again.
#[tokio::test]
async fn a_lost_session_whose_question_went_unanswered_is_asked_again() {
    let world = World::new().await;
    let snapshot = recorded_snapshot(&world).await;
    world.answer_gets(503, serde_json::json!({}));
    let mut rec = record(Stage::Running, None);
    world.store.put_session(&rec).unwrap();
    let mut runner = world.runner(rec.clone());
    runner.wind_down(Finish::Vanished).await.unwrap();
    assert!(world.backend.snapshot_exists(&snapshot).await.unwrap());
    rec.stage = Stage::Done(Finish::Vanished);
    world.store.put_session(&rec).unwrap();
    let id = fleet::SessionId::new(SESSION).unwrap();
    let last_asked = |world: &World| {
        let events = world.store.events(&id, 0).unwrap();
        let asked = events
            .iter()
            .rev()
            .find(|e| e.kind == "asked_if_over")
            .cloned();
        asked.map(|e| e.detail["status"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(
        last_asked(&world).as_deref(),
        Some(super::super::UNANSWERED)
    );

    world.answer_gets(200, entry_in(SessionStatus::Terminated));
    let deps = world.deps_on(world.backend.clone());
    assert!(super::super::ask_again_if_over(&deps, id.clone()).await);

    assert_snapshot_gone(&world, &snapshot).await;
    assert_eq!(last_asked(&world).as_deref(), Some("terminated"));
}

// Bench chaos, 30 minutes, seed 30: a host cut off while it suspended a
// session stored its snapshot after the claim had lapsed, another host had
// resumed the session and a third had ended it (deleting every snapshot
// it could see); the release was refused, and the late snapshot stayed for
// the retention period.
#[tokio::test]
async fn a_suspend_whose_release_was_refused_asks_if_the_session_is_over() {
    let world = World::new().await;
    let snapshot = recorded_snapshot(&world).await;
    world.answer_releases(
        409,
        serde_json::json!({"detail": "Session is not claimed by this acceptor"}),
    );
    world.answer_gets(200, entry_in(SessionStatus::Terminated));
    let mut runner = world.runner(record(Stage::Running, None));

    runner.wind_down(Finish::Suspended).await.unwrap();

    assert_snapshot_gone(&world, &snapshot).await;
}

// Bench chaos, seed 9589864553973519679: a full disk held a suspend's
// snapshot until the claim had lapsed and another host had resumed and
// ended the session (deleting every snapshot it could see); the release then
// found the entry gone from the queue (404), and the late snapshot stayed.
#[tokio::test]
async fn a_suspend_whose_release_found_no_entry_asks_if_the_session_is_over() {
    let world = World::new().await;
    let snapshot = recorded_snapshot(&world).await;
    world.answer_releases(404, serde_json::json!({"detail": "Not found"}));
    world.answer_gets(200, entry_in(SessionStatus::Terminated));
    let mut runner = world.runner(record(Stage::Running, None));

    runner.wind_down(Finish::Suspended).await.unwrap();

    assert_snapshot_gone(&world, &snapshot).await;
}

// A release that went through leaves a suspended session's snapshot alone:
// the session sleeps, and its resume needs it.
#[tokio::test]
async fn a_suspend_released_keeps_its_snapshot_without_asking() {
    let world = World::new().await;
    let snapshot = recorded_snapshot(&world).await;
    world.answer_gets(200, entry_in(SessionStatus::Terminated));
    let mut runner = world.runner(record(Stage::Running, None));

    runner.wind_down(Finish::Suspended).await.unwrap();

    assert!(world.backend.snapshot_exists(&snapshot).await.unwrap());
    assert!(
        !world
            .requests
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.starts_with("GET "))
    );
}

// Bench chaos, seed 20261202 (the suite beside a CPU hog): the claim lapsed
// while a suspend waited for a full disk, the session was resumed and
// ended elsewhere, and a renewal then got this host the claim again,
// showing the session terminated; the release went through, and the late
// snapshot stayed for the retention period.
#[tokio::test]
async fn a_suspend_told_the_session_ended_deletes_its_snapshot() {
    let world = World::new().await;
    let snapshot = recorded_snapshot(&world).await;
    let mut ended = claim_response();
    ended.status.session_status = SessionStatus::Terminated;
    let mut runner = world.runner_claimed_with(record(Stage::Running, None), ended);

    runner.wind_down(Finish::Suspended).await.unwrap();

    assert_snapshot_gone(&world, &snapshot).await;
}
