use super::*;
use SessionAction as A;
use fleet::{EntryMetadata, EntrySpec, EntryStatus};

const NOW: Millis = 1_000_000;

fn policy() -> Policy {
    Policy::default()
}

/// A running session, healthy, with a far deadline.
fn running() -> SessionObs {
    SessionObs {
        now: NOW,
        stage: Stage::Running,
        claim_deadline: Some(NOW + 300_000),
        claim_lifetime_ms: Some(300_000),
        has_connect_token: true,
        entry: EntryObs::Present(SessionStatus::Running),
        remote: RemoteObs::Running,
        remote_stopped_at: None,
        suspended_since: None,
        restarts: 0,
        start_failures: 0,
        confirm_attempts: 0,
        last_confirm_at: None,
        stopping: false,
        operator_stop: None,
    }
}

fn claimed() -> SessionObs {
    SessionObs {
        stage: Stage::Claimed,
        entry: EntryObs::Present(SessionStatus::Pending),
        remote: RemoteObs::NotStarted,
        ..running()
    }
}

fn status(s: SessionStatus) -> EntryObs {
    EntryObs::Present(s)
}

#[test]
fn a_fresh_claim_starts() {
    assert_eq!(plan_session(&claimed(), &policy()), A::Start);
    let starting = SessionObs {
        stage: Stage::Starting,
        ..claimed()
    };
    assert_eq!(plan_session(&starting, &policy()), A::Start);
}

#[test]
fn start_renews_first_when_the_deadline_is_near_or_the_token_was_lost() {
    let near = SessionObs {
        claim_deadline: Some(NOW + 59_000),
        ..claimed()
    };
    assert_eq!(plan_session(&near, &policy()), A::Renew);
    let passed = SessionObs {
        claim_deadline: Some(NOW - 1),
        ..claimed()
    };
    assert_eq!(plan_session(&passed, &policy()), A::Renew);
    let no_token = SessionObs {
        has_connect_token: false,
        ..claimed()
    };
    assert_eq!(plan_session(&no_token, &policy()), A::Renew);
    let no_deadline = SessionObs {
        claim_deadline: None,
        ..claimed()
    };
    assert_eq!(plan_session(&no_deadline, &policy()), A::Renew);
}

#[test]
fn before_start_a_terminated_or_vanished_session_is_let_go() {
    let terminated = SessionObs {
        entry: status(SessionStatus::Terminated),
        ..claimed()
    };
    assert_eq!(
        plan_session(&terminated, &policy()),
        A::Finish(Finish::Terminated)
    );
    let gone = SessionObs {
        entry: EntryObs::Gone,
        ..claimed()
    };
    assert_eq!(plan_session(&gone, &policy()), A::Finish(Finish::Released));
}

#[test]
fn an_unknown_entry_does_not_block_the_start() {
    // After a restart the queue view may not have the entry yet.
    let unknown = SessionObs {
        entry: EntryObs::Unknown,
        ..claimed()
    };
    assert_eq!(plan_session(&unknown, &policy()), A::Start);
}

#[test]
fn stopping_releases_only_claims_whose_sandbox_never_started() {
    let c = SessionObs {
        stopping: true,
        ..claimed()
    };
    assert_eq!(plan_session(&c, &policy()), A::Finish(Finish::Released));
    // A sandbox being created is finished, not abandoned half-way.
    let s = SessionObs {
        stopping: true,
        stage: Stage::Starting,
        ..claimed()
    };
    assert_eq!(plan_session(&s, &policy()), A::Start);
    let r = SessionObs {
        stopping: true,
        ..running()
    };
    assert_eq!(plan_session(&r, &policy()), A::Wait);
}

#[test]
fn repeated_start_failures_release_the_claim() {
    let p = policy();
    let failing = SessionObs {
        start_failures: p.max_start_failures,
        ..claimed()
    };
    assert_eq!(plan_session(&failing, &p), A::Finish(Finish::Released));
    let retry = SessionObs {
        start_failures: p.max_start_failures - 1,
        ..claimed()
    };
    assert_eq!(plan_session(&retry, &p), A::Start);
}

#[test]
fn a_healthy_running_session_waits_and_renews_before_the_deadline() {
    assert_eq!(plan_session(&running(), &policy()), A::Wait);
    let near = SessionObs {
        claim_deadline: Some(NOW + 60_000),
        ..running()
    };
    assert_eq!(plan_session(&near, &policy()), A::Renew);
    let just_outside = SessionObs {
        claim_deadline: Some(NOW + 60_001),
        ..running()
    };
    assert_eq!(plan_session(&just_outside, &policy()), A::Wait);
}

#[test]
fn transient_suspended_is_ignored_until_it_persists() {
    let p = policy();
    let first = SessionObs {
        entry: status(SessionStatus::Suspended),
        suspended_since: Some(NOW),
        ..running()
    };
    assert_eq!(plan_session(&first, &p), A::Wait);
    let short = SessionObs {
        suspended_since: Some(NOW - p.suspended_persist_ms + 1),
        ..first.clone()
    };
    assert_eq!(plan_session(&short, &p), A::Wait);
    let persisted = SessionObs {
        suspended_since: Some(NOW - p.suspended_persist_ms),
        ..first
    };
    assert_eq!(plan_session(&persisted, &p), A::KillRemote);
}

#[test]
fn suspended_is_believed_at_once_after_the_remote_exits() {
    for remote in [RemoteObs::Exited(0), RemoteObs::Exited(1), RemoteObs::Lost] {
        let obs = SessionObs {
            entry: status(SessionStatus::Suspended),
            remote,
            ..running()
        };
        assert_eq!(
            plan_session(&obs, &policy()),
            A::Finish(Finish::Suspended),
            "{remote:?}"
        );
    }
}

#[test]
fn terminated_kills_a_running_remote_then_finishes() {
    let live = SessionObs {
        entry: status(SessionStatus::Terminated),
        ..running()
    };
    assert_eq!(plan_session(&live, &policy()), A::KillRemote);
    for remote in [
        RemoteObs::Exited(0),
        RemoteObs::Exited(137),
        RemoteObs::Lost,
        RemoteObs::NotStarted,
    ] {
        let dead = SessionObs {
            remote,
            ..live.clone()
        };
        assert_eq!(
            plan_session(&dead, &policy()),
            A::Finish(Finish::Terminated),
            "{remote:?}"
        );
    }
}

#[test]
fn a_vanished_entry_kills_the_remote_and_keeps_the_work() {
    let live = SessionObs {
        entry: EntryObs::Gone,
        ..running()
    };
    assert_eq!(plan_session(&live, &policy()), A::KillRemote);
    let dead = SessionObs {
        remote: RemoteObs::Exited(0),
        ..live
    };
    assert_eq!(plan_session(&dead, &policy()), A::Finish(Finish::Vanished));
}

#[test]
fn a_clean_exit_confirms_the_final_status_at_intervals() {
    let p = policy();
    let exited = SessionObs {
        remote: RemoteObs::Exited(0),
        remote_stopped_at: Some(NOW),
        ..running()
    };
    assert_eq!(plan_session(&exited, &p), A::ConfirmEnd);
    let just_asked = SessionObs {
        confirm_attempts: 1,
        last_confirm_at: Some(NOW - 10),
        ..exited.clone()
    };
    assert_eq!(plan_session(&just_asked, &p), A::Wait);
    let due = SessionObs {
        last_confirm_at: Some(NOW - p.confirm_interval_ms),
        ..just_asked
    };
    assert_eq!(plan_session(&due, &p), A::ConfirmEnd);
    let terminated = SessionObs {
        entry: status(SessionStatus::Terminated),
        ..exited.clone()
    };
    assert_eq!(plan_session(&terminated, &p), A::Finish(Finish::Terminated));
}

#[test]
fn an_unconfirmable_end_keeps_a_recovery_snapshot() {
    let p = policy();
    let obs = SessionObs {
        remote: RemoteObs::Exited(0),
        confirm_attempts: p.confirm_attempts,
        entry: status(SessionStatus::Running),
        ..running()
    };
    assert_eq!(plan_session(&obs, &p), A::Finish(Finish::Failed));
    let unknown_status = SessionObs {
        entry: status(SessionStatus::Unknown("exit-ish".into())),
        ..obs
    };
    assert_eq!(plan_session(&unknown_status, &p), A::Finish(Finish::Failed));
}

#[test]
fn confirming_still_renews_the_claim() {
    let obs = SessionObs {
        remote: RemoteObs::Exited(0),
        claim_deadline: Some(NOW + 1_000),
        ..running()
    };
    assert_eq!(plan_session(&obs, &policy()), A::Renew);
}

#[test]
fn a_crashed_remote_restarts_with_backoff_then_gives_up() {
    let p = policy();
    let crashed = SessionObs {
        remote: RemoteObs::Exited(3),
        remote_stopped_at: Some(NOW),
        ..running()
    };
    assert_eq!(plan_session(&crashed, &p), A::Wait, "backoff first");
    let later = SessionObs {
        now: NOW + p.restart_delay_ms(0),
        ..crashed.clone()
    };
    assert_eq!(plan_session(&later, &p), A::RestartRemote);
    let second = SessionObs {
        restarts: 1,
        now: NOW + p.restart_delay_ms(0),
        ..crashed.clone()
    };
    assert_eq!(plan_session(&second, &p), A::Wait, "backoff doubles");
    let exhausted = SessionObs {
        restarts: p.max_restarts,
        now: NOW + 1_000_000,
        ..crashed.clone()
    };
    assert_eq!(plan_session(&exhausted, &p), A::Finish(Finish::Failed));
    let lost = SessionObs {
        remote: RemoteObs::Lost,
        now: NOW + 1_000_000,
        claim_deadline: Some(NOW + 2_000_000),
        ..crashed
    };
    assert_eq!(plan_session(&lost, &p), A::RestartRemote);
}

#[test]
fn a_restart_after_an_orchestrator_restart_renews_for_a_fresh_token() {
    let obs = SessionObs {
        remote: RemoteObs::Exited(1),
        remote_stopped_at: Some(0),
        has_connect_token: false,
        ..running()
    };
    assert_eq!(plan_session(&obs, &policy()), A::Renew);
    let not_started = SessionObs {
        remote: RemoteObs::NotStarted,
        ..running()
    };
    assert_eq!(plan_session(&not_started, &policy()), A::RestartRemote);
}

#[test]
fn an_adopted_running_remote_is_left_alone() {
    // After a restart: no token in memory, but the remote runs. It keeps its
    // own token; only the claim needs renewing.
    let obs = SessionObs {
        has_connect_token: false,
        ..running()
    };
    assert_eq!(plan_session(&obs, &policy()), A::Renew);
}

#[test]
fn finishing_resumes_and_done_waits() {
    for f in [
        Finish::Suspended,
        Finish::Terminated,
        Finish::Vanished,
        Finish::Failed,
        Finish::Released,
        Finish::Stopped {
            keep_snapshot: true,
        },
        Finish::Stopped {
            keep_snapshot: false,
        },
    ] {
        let obs = SessionObs {
            stage: Stage::Finishing(f),
            ..running()
        };
        assert_eq!(plan_session(&obs, &policy()), A::Finish(f));
        let done = SessionObs {
            stage: Stage::Done(f),
            ..running()
        };
        assert_eq!(plan_session(&done, &policy()), A::Wait);
    }
}

// ---- operator stop (`garrison terminate`) ----

const KEEP: OperatorStop = OperatorStop {
    keep_snapshot: true,
};
const DROP: OperatorStop = OperatorStop {
    keep_snapshot: false,
};

fn stopped(stop: OperatorStop) -> A {
    A::Finish(Finish::Stopped {
        keep_snapshot: stop.keep_snapshot,
    })
}

#[test]
fn operator_stop_before_start_winds_down_without_starting() {
    for stop in [KEEP, DROP] {
        for stage in [Stage::Claimed, Stage::Starting] {
            for entry in [
                status(SessionStatus::Pending),
                status(SessionStatus::Running),
                status(SessionStatus::Terminated),
                EntryObs::Unknown,
                EntryObs::Gone,
            ] {
                for (stopping, start_failures, has_connect_token) in
                    [(false, 0, true), (true, 0, true), (false, 9, false)]
                {
                    let obs = SessionObs {
                        stage,
                        entry: entry.clone(),
                        stopping,
                        start_failures,
                        has_connect_token,
                        operator_stop: Some(stop),
                        ..claimed()
                    };
                    assert_eq!(
                        plan_session(&obs, &policy()),
                        stopped(stop),
                        "{stage:?} {entry:?} stopping={stopping}"
                    );
                }
            }
        }
    }
}

#[test]
fn operator_stop_kills_a_running_remote_first_whatever_the_entry_says() {
    for stop in [KEEP, DROP] {
        for entry in [
            status(SessionStatus::Running),
            status(SessionStatus::Suspended),
            status(SessionStatus::Terminated),
            EntryObs::Unknown,
            EntryObs::Gone,
        ] {
            for (claim_deadline, has_connect_token) in [
                (Some(NOW + 300_000), true),
                (Some(NOW - 1), false),
                (None, true),
            ] {
                let obs = SessionObs {
                    entry: entry.clone(),
                    claim_deadline,
                    has_connect_token,
                    suspended_since: Some(NOW - 1),
                    operator_stop: Some(stop),
                    ..running()
                };
                assert_eq!(
                    plan_session(&obs, &policy()),
                    A::KillRemote,
                    "{entry:?} {claim_deadline:?}"
                );
            }
        }
    }
}

#[test]
fn operator_stop_after_the_remote_stopped_finishes_instead_of_restarting_or_confirming() {
    let p = policy();
    for stop in [KEEP, DROP] {
        for remote in [
            RemoteObs::NotStarted,
            RemoteObs::Exited(0),
            RemoteObs::Exited(1),
            RemoteObs::Exited(137),
            RemoteObs::Lost,
        ] {
            for entry in [
                status(SessionStatus::Running),
                status(SessionStatus::Suspended),
                status(SessionStatus::Terminated),
                EntryObs::Gone,
            ] {
                for (restarts, confirm_attempts) in [(0, 0), (p.max_restarts, p.confirm_attempts)] {
                    let obs = SessionObs {
                        remote,
                        remote_stopped_at: Some(NOW),
                        entry: entry.clone(),
                        restarts,
                        confirm_attempts,
                        stopping: true,
                        operator_stop: Some(stop),
                        ..running()
                    };
                    assert_eq!(
                        plan_session(&obs, &p),
                        stopped(stop),
                        "{remote:?} {entry:?} restarts={restarts}"
                    );
                }
            }
        }
    }
}

#[test]
fn operator_stop_does_not_change_a_wind_down_under_way_or_a_done_session() {
    for stop in [KEEP, DROP] {
        for f in [
            Finish::Suspended,
            Finish::Terminated,
            Finish::Vanished,
            Finish::Failed,
            Finish::Released,
            Finish::Stopped {
                keep_snapshot: !stop.keep_snapshot,
            },
        ] {
            for remote in [RemoteObs::Running, RemoteObs::Exited(0)] {
                let finishing = SessionObs {
                    stage: Stage::Finishing(f),
                    remote,
                    operator_stop: Some(stop),
                    ..running()
                };
                assert_eq!(plan_session(&finishing, &policy()), A::Finish(f));
                let done = SessionObs {
                    stage: Stage::Done(f),
                    ..finishing
                };
                assert_eq!(plan_session(&done, &policy()), A::Wait);
            }
        }
    }
}

#[test]
fn a_stopped_finish_resumes_after_a_crash_without_the_request() {
    // The request lives in memory; the stage recorded before the wind-down
    // carries it across a restart.
    for keep_snapshot in [true, false] {
        let f = Finish::Stopped { keep_snapshot };
        let obs = SessionObs {
            stage: Stage::Finishing(f),
            remote: RemoteObs::Running,
            has_connect_token: false,
            ..running()
        };
        assert_eq!(plan_session(&obs, &policy()), A::Finish(f));
    }
}

#[test]
fn without_an_operator_stop_nothing_changes() {
    assert_eq!(plan_session(&running(), &policy()), A::Wait);
    assert_eq!(plan_session(&claimed(), &policy()), A::Start);
}

#[test]
fn restart_delay_is_capped_and_never_overflows() {
    let p = policy();
    assert_eq!(p.restart_delay_ms(0), 1_000);
    assert_eq!(p.restart_delay_ms(1), 2_000);
    assert_eq!(p.restart_delay_ms(40), p.restart_backoff_max_ms);
    assert_eq!(p.restart_delay_ms(u32::MAX), p.restart_backoff_max_ms);
}

#[test]
fn suspended_tracking() {
    let s = status(SessionStatus::Suspended);
    assert_eq!(track_suspended(None, &s, 5), Some(5));
    assert_eq!(track_suspended(Some(2), &s, 5), Some(2));
    assert_eq!(
        track_suspended(Some(2), &status(SessionStatus::Running), 5),
        None
    );
    assert_eq!(track_suspended(Some(2), &EntryObs::Gone, 5), None);
}

// ---- claims ----

const ME: &str = "acceptor-me";

fn entry(id: &str, created: i64, phase: Phase, session_status: SessionStatus) -> QueueEntry {
    QueueEntry {
        metadata: EntryMetadata {
            session_id: id.into(),
            outpost_id: "o".into(),
            created_at: Timestamp::from_unix_millis(created),
            updated_at: Timestamp::from_unix_millis(created),
        },
        spec: EntrySpec {
            platform: Platform::Linux,
            ..Default::default()
        },
        status: EntryStatus {
            phase,
            session_status,
            ..Default::default()
        },
    }
}

fn entries(list: Vec<QueueEntry>) -> BTreeMap<String, QueueEntry> {
    list.into_iter()
        .map(|e| (e.session_id().to_owned(), e))
        .collect()
}

struct ClaimCase {
    entries: BTreeMap<String, QueueEntry>,
    held: BTreeSet<String>,
    lost: BTreeMap<String, Option<Timestamp>>,
    cooldown: BTreeMap<String, Millis>,
    capacity: usize,
    stopping: bool,
}

impl ClaimCase {
    fn new(list: Vec<QueueEntry>) -> Self {
        Self {
            entries: entries(list),
            held: BTreeSet::new(),
            lost: BTreeMap::new(),
            cooldown: BTreeMap::new(),
            capacity: 10,
            stopping: false,
        }
    }

    fn plan(&self) -> Vec<ClaimAction> {
        plan_claims(&ClaimObs {
            now: NOW,
            acceptor_id: ME,
            platform: &Platform::Linux,
            capacity: self.capacity,
            stopping: self.stopping,
            entries: &self.entries,
            held: &self.held,
            lost: &self.lost,
            cooldown: &self.cooldown,
        })
    }
}

fn claim(id: &str) -> ClaimAction {
    ClaimAction::Claim(id.into())
}

#[test]
fn pending_entries_are_claimed_oldest_first_within_capacity() {
    let mut case = ClaimCase::new(vec![
        entry("c", 3, Phase::Pending, SessionStatus::Pending),
        entry("a", 1, Phase::Pending, SessionStatus::Pending),
        entry("b", 2, Phase::Pending, SessionStatus::Running),
    ]);
    assert_eq!(case.plan(), vec![claim("a"), claim("b"), claim("c")]);
    case.capacity = 2;
    assert_eq!(case.plan(), vec![claim("a"), claim("b")]);
    case.capacity = 0;
    assert!(case.plan().is_empty());
}

#[test]
fn lingering_suspended_and_terminated_rows_are_never_claimed() {
    let case = ClaimCase::new(vec![
        entry("s", 1, Phase::Pending, SessionStatus::Suspended),
        entry("t", 2, Phase::Pending, SessionStatus::Terminated),
        entry(
            "ok",
            3,
            Phase::Pending,
            SessionStatus::Unknown("brand-new".into()),
        ),
    ]);
    assert_eq!(case.plan(), vec![claim("ok")]);
}

#[test]
fn other_platforms_held_sessions_and_unknown_phases_are_skipped() {
    let mut mac = entry("mac", 1, Phase::Pending, SessionStatus::Pending);
    mac.spec.platform = Platform::Macos;
    let mut case = ClaimCase::new(vec![
        mac,
        entry("held", 2, Phase::Pending, SessionStatus::Pending),
        entry(
            "odd",
            3,
            Phase::Unknown("queued".into()),
            SessionStatus::Pending,
        ),
    ]);
    case.held.insert("held".into());
    assert!(case.plan().is_empty());
}

#[test]
fn our_own_unrecorded_claim_is_adopted_first() {
    let mut mine = entry("mine", 9, Phase::Claimed, SessionStatus::Running);
    mine.status.acceptor_id = Some(ME.into());
    let case = ClaimCase::new(vec![
        entry("new", 1, Phase::Pending, SessionStatus::Pending),
        mine,
    ]);
    assert_eq!(
        case.plan(),
        vec![ClaimAction::Adopt("mine".into()), claim("new")]
    );
}

#[test]
fn expired_foreign_claims_are_claimable_unless_the_session_runs() {
    let mut expired = entry("expired", 1, Phase::Claimed, SessionStatus::Pending);
    expired.status.acceptor_id = Some("other".into());
    expired.status.claim_deadline = Timestamp::from_unix_millis(NOW - 1);
    let mut live = expired.clone();
    live.metadata.session_id = "live".into();
    live.status.session_status = SessionStatus::Running;
    let mut valid = expired.clone();
    valid.metadata.session_id = "valid".into();
    valid.status.claim_deadline = Timestamp::from_unix_millis(NOW + 1);
    let case = ClaimCase::new(vec![expired, live, valid]);
    assert_eq!(case.plan(), vec![claim("expired")]);
}

#[test]
fn a_lost_claim_is_retried_only_after_the_entry_changes() {
    let e = entry("x", 1, Phase::Pending, SessionStatus::Pending);
    let mut case = ClaimCase::new(vec![e.clone()]);
    case.lost.insert("x".into(), e.metadata.updated_at);
    assert!(case.plan().is_empty());
    case.entries.get_mut("x").unwrap().metadata.updated_at = Timestamp::from_unix_millis(99);
    assert_eq!(case.plan(), vec![claim("x")]);
}

#[test]
fn stopping_claims_nothing() {
    let mut case = ClaimCase::new(vec![entry("a", 1, Phase::Pending, SessionStatus::Pending)]);
    case.stopping = true;
    assert!(case.plan().is_empty());
}

#[test]
fn short_claims_renew_at_half_their_lifetime() {
    let short = SessionObs {
        claim_lifetime_ms: Some(4_000),
        claim_deadline: Some(NOW + 2_001),
        ..running()
    };
    assert_eq!(plan_session(&short, &policy()), A::Wait);
    let due = SessionObs {
        claim_deadline: Some(NOW + 2_000),
        ..short
    };
    assert_eq!(plan_session(&due, &policy()), A::Renew);
    let unknown_lifetime = SessionObs {
        claim_lifetime_ms: None,
        claim_deadline: Some(NOW + 60_000),
        ..running()
    };
    assert_eq!(plan_session(&unknown_lifetime, &policy()), A::Renew);
}

#[test]
fn a_released_session_cools_down_before_it_is_claimed_again() {
    let mut case = ClaimCase::new(vec![entry("x", 1, Phase::Pending, SessionStatus::Pending)]);
    case.cooldown.insert("x".into(), NOW + 1);
    assert!(case.plan().is_empty());
    case.cooldown.insert("x".into(), NOW);
    assert_eq!(case.plan(), vec![claim("x")]);
}
