//! An entry the queue view no longer has is asked about before the
//! session counts it gone (bench chaos: a running session wound down as
//! vanished while the fleet API still had it, and another acceptor served
//! it meanwhile).

use super::*;

fn session_id() -> fleet::SessionId {
    fleet::SessionId::new(SESSION).unwrap()
}

/// The `GET`s of the session the fleet API has had.
fn gets(world: &World) -> usize {
    world
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.starts_with("GET") && r.ends_with(&format!("/{SESSION}")))
        .count()
}

#[tokio::test]
async fn an_entry_missing_from_the_view_is_asked_about_before_it_counts_as_gone() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let mut runner = world.runner(record(Stage::Running, Some(handle)));
    // A synced view without the entry.
    runner.deps.view.mark_synced();
    let mut live = claim_response();
    live.status.session_status = SessionStatus::Running;
    world.answer_gets(200, serde_json::to_value(&live).unwrap());

    runner.observe().await;

    assert_eq!(runner.entry_obs, EntryObs::Present(SessionStatus::Running));
    assert!(
        runner.deps.view.get(&session_id()).is_some(),
        "the view learns the entry back"
    );

    runner.deps.view.remove(&session_id());
    world.answer_gets(404, serde_json::json!({"detail": "Not Found"}));

    runner.observe().await;

    assert_eq!(runner.entry_obs, EntryObs::Gone);
    assert_eq!(gets(&world), 2, "one question per disappearance");

    // Once gone it stays gone without asking again.
    runner.observe().await;
    assert_eq!(gets(&world), 2);
}
