//! The runner's own timers run on the monotonic clock: a wall clock
//! stepped (`date -s`, an NTP step; `garrison bench chaos`'s `clock_step`)
//! neither cuts them short nor stretches them. The test pauses tokio's
//! clock and moves it on while the wall clock stands still, which is what
//! a step back of the wall clock looks like from inside.

use super::*;

// Before the fix the runner timed its waits on the wall clock: a step
// forward cut a `suspended` reading's grace short (a passing reading
// could end a running session), a step back stretched it, the restart
// delay and the confirming reads' spacing likewise.
#[tokio::test]
async fn a_suspended_readings_grace_is_timed_on_the_monotonic_clock() {
    let world = World::new().await;
    let mut runner = world.runner(record(Stage::Running, None));
    let mut suspended = claim_response();
    suspended.status.session_status = SessionStatus::Suspended;
    runner.deps.view.upsert(suspended);
    tokio::time::pause();

    runner.observe().await;
    assert_eq!(next_action(&runner), SessionAction::ConfirmEnd);

    let grace = runner.deps.policy.suspend_exit_grace_ms as u64;
    tokio::time::advance(Duration::from_millis(grace)).await;
    assert_eq!(
        next_action(&runner),
        SessionAction::Finish(Finish::Suspended),
        "the reading lasted its grace on the monotonic clock"
    );
}
