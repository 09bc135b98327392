//! Claim and release: the compare-and-swap, renewal, expiry, running
//! sessions, release outcomes, deadline spellings.

use std::time::Duration;

use emulator::EmulatorConfig;
use fleet::{ClaimError, Phase, ReleaseOutcome, SessionStatus, Timestamp, TimestampFormat};

use crate::common::{connect_remote, env, eventually, sid};

#[tokio::test]
async fn a_claim_race_has_exactly_one_winner() {
    let env = env(EmulatorConfig::default()).await;
    let other = crate::common::client(&env.emu, &env.emu.account_token());
    for _ in 0..10 {
        let id = env.session(None);
        let checked = sid(&id);
        let (a, b) = tokio::join!(
            env.client.claim(&checked, "acc-a"),
            other.claim(&checked, "acc-b")
        );
        let (winner, loser) = match (a, b) {
            (Ok(w), Err(l)) => (w, l),
            (Err(l), Ok(w)) => (w, l),
            (a, b) => panic!("expected one winner: {a:?} / {b:?}"),
        };
        assert!(matches!(loser, ClaimError::Conflict), "{loser:?}");
        assert_eq!(winner.status.phase, Phase::Claimed);
        let holder = winner.status.acceptor_id.clone().unwrap();
        assert!(holder == "acc-a" || holder == "acc-b");
        assert!(winner.status.connect_token.is_some());
        assert!(winner.status.gateway_url.is_some());
        let seen = env.client.get(&sid(&id)).await.unwrap().unwrap();
        assert_eq!(seen.status.acceptor_id.as_deref(), Some(holder.as_str()));
        // The connect token appears only in the claim response.
        assert!(seen.status.connect_token.is_none());
    }
}

#[tokio::test]
async fn renewal_by_the_holder_gives_a_fresh_token_and_a_later_deadline() {
    let env = env(EmulatorConfig::default()).await;
    let id = env.session(None);
    let first = env.client.claim(&sid(&id), "acc").await.unwrap();
    // Let the clock move on so the new deadline can be later.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = env.client.claim(&sid(&id), "acc").await.unwrap();
    assert_ne!(
        first.status.connect_token.unwrap().expose(),
        second.status.connect_token.unwrap().expose()
    );
    assert!(second.status.claim_deadline.unwrap() > first.status.claim_deadline.unwrap());
    assert_eq!(second.status.acceptor_id.as_deref(), Some("acc"));
    let transcript = env.emu.session(&id).unwrap();
    assert_eq!(transcript.events("renewed").count(), 1);
}

/// Waits (by the wall clock the emulator also uses) until `deadline` passed.
async fn wait_past(deadline: Timestamp) {
    eventually("the claim deadline to pass", || async {
        (Timestamp::now().unix_millis() > deadline.unix_millis() + 50).then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_expired_claim_returns_to_the_queue_unless_the_session_runs() {
    let env = env(EmulatorConfig {
        claim_ttl: Duration::from_millis(400),
        ..EmulatorConfig::default()
    })
    .await;

    // Not running: after the deadline another acceptor can claim.
    let idle = env.session(None);
    let claim = env.client.claim(&sid(&idle), "acc-a").await.unwrap();
    wait_past(claim.status.claim_deadline.unwrap()).await;
    let taken = env.client.claim(&sid(&idle), "acc-b").await.unwrap();
    assert_eq!(taken.status.acceptor_id.as_deref(), Some("acc-b"));

    // Running: a remote connected with the claim's token; the claim stays
    // with its worker even past the deadline.
    let live = env.session(None);
    let claim = env.client.claim(&sid(&live), "acc-a").await.unwrap();
    let _remote = connect_remote(
        claim.status.gateway_url.as_deref().unwrap(),
        &live,
        claim.status.connect_token.as_ref().unwrap(),
    )
    .await;
    eventually("the session to run", || async {
        let entry = env.client.get(&sid(&live)).await.unwrap()?;
        (entry.status.session_status == SessionStatus::Running).then_some(())
    })
    .await;
    // Claim again in case the first one lapsed while the remote dialled; the
    // holder's re-claim always succeeds.
    let claim = env.client.claim(&sid(&live), "acc-a").await.unwrap();
    wait_past(claim.status.claim_deadline.unwrap()).await;
    assert!(matches!(
        env.client.claim(&sid(&live), "acc-b").await,
        Err(ClaimError::Conflict)
    ));
    let entry = env.client.get(&sid(&live)).await.unwrap().unwrap();
    assert_eq!(entry.status.acceptor_id.as_deref(), Some("acc-a"));
    // The holder renews a live session's claim.
    assert!(env.client.claim(&sid(&live), "acc-a").await.is_ok());
}

#[tokio::test]
async fn release_outcomes() {
    let env = env(EmulatorConfig::default()).await;
    let id = env.session(None);
    env.client.claim(&sid(&id), "acc-a").await.unwrap();
    assert_eq!(
        env.client.release(&sid(&id), "acc-b").await.unwrap(),
        ReleaseOutcome::NotHolder
    );
    assert_eq!(
        env.client.release(&sid(&id), "acc-a").await.unwrap(),
        ReleaseOutcome::Released
    );
    let entry = env.client.get(&sid(&id)).await.unwrap().unwrap();
    assert_eq!(entry.status.phase, Phase::Pending);
    assert_eq!(entry.status.acceptor_id, None);
    // Released already: nothing left to release.
    assert_eq!(
        env.client.release(&sid(&id), "acc-a").await.unwrap(),
        ReleaseOutcome::NotHolder
    );
    env.client.claim(&sid(&id), "acc-a").await.unwrap();
    env.emu.remove_entry(&id);
    assert_eq!(
        env.client.release(&sid(&id), "acc-a").await.unwrap(),
        ReleaseOutcome::Gone
    );
    assert!(matches!(
        env.client.claim(&sid(&id), "acc-a").await,
        Err(ClaimError::Fleet(fleet::FleetError::NotFound { .. }))
    ));
}

#[tokio::test]
async fn every_deadline_spelling_parses_to_an_instant() {
    let ttl = Duration::from_secs(300);
    for format in [
        TimestampFormat::Seconds,
        TimestampFormat::Millis,
        TimestampFormat::Iso8601,
    ] {
        let env = env(EmulatorConfig {
            claim_ttl: ttl,
            deadline_format: format,
            ..EmulatorConfig::default()
        })
        .await;
        let id = env.session(None);
        let before = Timestamp::now().unix_millis();
        let claimed = env.client.claim(&sid(&id), "acc").await.unwrap();
        let deadline = claimed.status.claim_deadline.expect("deadline parses");
        // Loose bounds: only a misread unit (seconds vs ms) is caught.
        let ttl_ms = ttl.as_millis() as i64;
        let offset = deadline.unix_millis() - before;
        assert!(
            offset > ttl_ms - 60_000 && offset < ttl_ms + 3_600_000,
            "{format:?}: deadline {offset} ms away"
        );
        let read = env.client.get(&sid(&id)).await.unwrap().unwrap();
        assert_eq!(read.status.claim_deadline, Some(deadline), "{format:?}");
    }
}
