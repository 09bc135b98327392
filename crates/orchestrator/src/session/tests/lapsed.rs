//! A claim that lapsed while the fleet API was out of reach: given up
//! before the session ran, kept once the fleet API showed it running.

use super::*;

/// A claim answer that lasts `ms` from now, showing `status`.
fn claim_lasting(ms: i64, status: SessionStatus) -> QueueEntry {
    let mut answer = claim_response();
    answer.status.claim_deadline = Timestamp::from_unix_millis(now_ms() + ms);
    answer.status.session_status = status;
    answer
}

/// Waits out a claim of `ms` (not a timed assertion: the claim must be
/// past its deadline for what follows to mean anything).
async fn outlive(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms + 300)).await;
}

// Before the fix a renewal that failed after the deadline was retried
// while the remote went on trying to dial in: another acceptor could claim
// the session (its status not `running`, the claim returned to the queue)
// and start a remote of its own (bench chaos, seed 185218557).
#[tokio::test]
async fn a_claim_that_lapsed_before_the_session_ran_is_given_up() {
    let world = World::new().await;
    let mut runner = world.runner_claimed_with(
        record(Stage::Running, None),
        claim_lasting(1_000, SessionStatus::Pending),
    );
    world.answer_claims(503, serde_json::json!({"error": "server_error"}));
    outlive(1_000).await;

    runner.renew().await.unwrap();

    assert!(
        matches!(runner.rec.stage, Stage::Finishing(_)),
        "{:?}",
        runner.rec.stage
    );
    assert!(runner.claim_lost());
}

// Before the fix the claim was given up only once its reckoned expiry had
// passed, after the server's deadline: a remote whose cut healed just then
// dialled in after another acceptor had claimed the session, and served a
// write lost with its sandbox (bench chaos, seed 3210005263).
#[tokio::test]
async fn an_unrenewed_claim_is_given_up_before_its_deadline() {
    // Five seconds long (given up a fifth of it, 1 s, before its end),
    // 4.3 s of it gone: 0.7 s left, not yet expired.
    let mut answer = answer_at(now_ms(), Some(5));
    answer.status.session_status = SessionStatus::Pending;
    let world = World::new().await;
    let mut runner = world.runner_claimed_with(record(Stage::Running, None), answer);
    world.answer_claims(503, serde_json::json!({"error": "server_error"}));
    tokio::time::sleep(Duration::from_millis(4_300)).await;

    runner.renew().await.unwrap();

    assert!(
        matches!(runner.rec.stage, Stage::Finishing(_)),
        "{:?}",
        runner.rec.stage
    );
}

#[tokio::test]
async fn a_failed_renewal_with_time_left_is_retried() {
    let world = World::new().await;
    let mut runner = world.runner_claimed_with(
        record(Stage::Running, None),
        claim_lasting(300_000, SessionStatus::Pending),
    );
    world.answer_claims(503, serde_json::json!({"error": "server_error"}));

    runner.renew().await.unwrap();

    assert_eq!(runner.rec.stage, Stage::Running);
}

// The fleet API keeps a running session with its worker after the claim's
// deadline: stopping its remote would strand it.
#[tokio::test]
async fn a_lapsed_claim_on_a_session_seen_running_is_kept() {
    let world = World::new().await;
    let mut runner = world.runner_claimed_with(
        record(Stage::Running, None),
        claim_lasting(1_000, SessionStatus::Pending),
    );
    let mut running = claim_response();
    running.status.session_status = SessionStatus::Running;
    runner.note_entry(running);
    world.answer_claims(503, serde_json::json!({"error": "server_error"}));
    outlive(1_000).await;

    runner.renew().await.unwrap();

    assert_eq!(runner.rec.stage, Stage::Running);
}

// Bench chaos, seed 14030750162014007195: Garrison was paused between its
// claim request and reading the answer. Read 12.6 s after it was sent, the
// 10-second claim was reckoned from the reading, and a remote started
// after the server had given the session to another acceptor, whose own
// remote then dialled in beside it.
#[tokio::test]
async fn a_claim_answer_read_after_the_claim_lapsed_starts_no_remote() {
    let world = World::new().await;
    let mut answer = answer_at(now_ms() - 12_000, Some(10));
    answer.status.session_status = SessionStatus::Pending;
    let sent = tokio::time::Instant::now()
        .checked_sub(Duration::from_secs(12))
        .expect("the machine has been up for 12 s");
    let mut runner = world.runner_sent_at(
        record(Stage::Claimed, None),
        answer,
        world.backend.clone(),
        sent,
    );

    runner.start().await.unwrap();

    assert!(runner.rec.process.is_none(), "a remote was started");
    assert!(runner.rec.handle.is_none(), "a sandbox was made");
}
