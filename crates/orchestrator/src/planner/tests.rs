use super::*;
use SessionAction as A;

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
        last_renewal_at: None,
        has_connect_token: true,
        entry: EntryObs::Present(SessionStatus::Running),
        remote: RemoteObs::Running,
        remote_stopped_at: None,
        suspended_since: None,
        suspended_confirmations: 0,
        restarts: 0,
        start_failures: 0,
        confirm_attempts: 0,
        last_confirm_at: None,
        stopping: false,
        operator_stop: None,
        has_sandbox: true,
        network_policy: Some(NetworkPolicy::default()),
        applied_policy: Some(NetworkPolicy::default()),
    }
}

fn claimed() -> SessionObs {
    SessionObs {
        stage: Stage::Claimed,
        entry: EntryObs::Present(SessionStatus::Pending),
        remote: RemoteObs::NotStarted,
        has_sandbox: false,
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
fn a_claim_on_a_sleeping_session_is_given_back_before_anything_starts() {
    let sleeping = SessionObs {
        entry: status(SessionStatus::Suspended),
        ..claimed()
    };
    assert_eq!(
        plan_session(&sleeping, &policy()),
        A::Finish(Finish::Released)
    );
    // A sandbox being made is finished first: what it restored is
    // snapshotted again when the session winds down.
    let starting = SessionObs {
        stage: Stage::Starting,
        ..sleeping
    };
    assert_eq!(plan_session(&starting, &policy()), A::Start);
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

/// The docs: the remote of a sleeping session is told by Devin and exits 0
/// by itself; only `terminated` or a gone entry kill it at once.
#[test]
fn a_suspended_remote_is_left_to_exit_by_itself_until_the_grace_ends() {
    let p = Policy::default();
    assert!(p.suspend_exit_grace_ms >= 120_000);
    let suspended = |for_ms: Millis| SessionObs {
        entry: status(SessionStatus::Suspended),
        suspended_since: Some(NOW - for_ms),
        ..running()
    };
    for waited in [0, 10_000, 60_000, p.suspend_exit_grace_ms - 1] {
        assert_eq!(plan_session(&suspended(waited), &p), A::Wait, "{waited}");
    }
    assert_eq!(
        plan_session(&suspended(p.suspend_exit_grace_ms), &p),
        A::KillRemote
    );
    // The remote exited by itself: wound down as suspended once reads
    // after the exit confirm it, no kill.
    let exited = SessionObs {
        remote: RemoteObs::Exited(0),
        suspended_confirmations: p.suspend_confirmations,
        ..suspended(5_000)
    };
    assert_eq!(plan_session(&exited, &p), A::Finish(Finish::Suspended));
    // Terminated or gone: killed at once.
    for entry in [status(SessionStatus::Terminated), EntryObs::Gone] {
        let obs = SessionObs { entry, ..running() };
        assert_eq!(plan_session(&obs, &p), A::KillRemote);
    }
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
        suspended_since: Some(NOW - p.suspend_exit_grace_ms + 1),
        ..first.clone()
    };
    assert_eq!(plan_session(&short, &p), A::Wait);
    let persisted = SessionObs {
        suspended_since: Some(NOW - p.suspend_exit_grace_ms),
        ..first
    };
    assert_eq!(plan_session(&persisted, &p), A::KillRemote);
}

/// A live session can read `suspended` for a moment, also in the seconds
/// its final status lags the remote's exit: after the exit it is read again
/// until confirming reads in a row agree. Winding down on one reading gave
/// a running session back to the queue, and a second remote served it.
#[test]
fn suspended_after_the_remote_stopped_is_believed_once_reads_confirm_it() {
    let p = policy();
    assert!(p.suspend_confirmations >= 2);
    for remote in [RemoteObs::Exited(0), RemoteObs::Exited(1), RemoteObs::Lost] {
        let read = |confirmations| SessionObs {
            entry: status(SessionStatus::Suspended),
            remote,
            remote_stopped_at: Some(NOW - 10),
            suspended_since: Some(NOW - 10),
            suspended_confirmations: confirmations,
            ..running()
        };
        // Read again at the confirm cadence, not wound down.
        for confirmations in 0..p.suspend_confirmations {
            assert_eq!(
                plan_session(&read(confirmations), &p),
                A::ConfirmEnd,
                "{remote:?} {confirmations}"
            );
            let just_asked = SessionObs {
                confirm_attempts: confirmations + 1,
                last_confirm_at: Some(NOW - 10),
                ..read(confirmations)
            };
            assert_eq!(plan_session(&just_asked, &p), A::Wait, "{remote:?}");
        }
        assert_eq!(
            plan_session(&read(p.suspend_confirmations), &p),
            A::Finish(Finish::Suspended),
            "{remote:?}"
        );
        // A `suspended` that lasted the grace while the remote ran (the
        // remote was killed for it) needs no more reads.
        let lasted = SessionObs {
            suspended_since: Some(NOW - p.suspend_exit_grace_ms),
            ..read(0)
        };
        assert_eq!(
            plan_session(&lasted, &p),
            A::Finish(Finish::Suspended),
            "{remote:?}"
        );
        // Unconfirmed within the confirm budget: the end is unknown.
        let exhausted = SessionObs {
            confirm_attempts: p.confirm_attempts,
            ..read(p.suspend_confirmations - 1)
        };
        assert_eq!(
            plan_session(&exhausted, &p),
            A::Finish(Finish::Failed),
            "{remote:?}"
        );
    }
}

#[test]
fn only_confirming_reads_in_a_row_count_towards_a_suspend() {
    let suspended = status(SessionStatus::Suspended);
    // A confirming read adds one; the queue view saying the same keeps it.
    assert_eq!(track_suspended_confirmations(0, &suspended, true), 1);
    assert_eq!(track_suspended_confirmations(2, &suspended, true), 3);
    assert_eq!(track_suspended_confirmations(2, &suspended, false), 2);
    assert_eq!(track_suspended_confirmations(0, &suspended, false), 0);
    // Anything else, from either, starts over.
    for entry in [
        status(SessionStatus::Running),
        status(SessionStatus::Terminated),
        EntryObs::Gone,
        EntryObs::Unknown,
    ] {
        for confirming in [true, false] {
            assert_eq!(
                track_suspended_confirmations(2, &entry, confirming),
                0,
                "{entry:?} {confirming}"
            );
        }
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

fn allow_only(host: &str) -> NetworkPolicy {
    NetworkPolicy {
        enabled: true,
        allow: vec![fleet::AllowRule::Hostname(host.into())],
    }
}

#[test]
fn a_changed_network_policy_is_applied_first_in_any_stage_with_a_sandbox() {
    let changed = |obs: SessionObs| SessionObs {
        network_policy: Some(allow_only("example.com")),
        ..obs
    };
    let finishing = SessionObs {
        stage: Stage::Finishing(Finish::Suspended),
        remote: RemoteObs::Exited(0),
        ..running()
    };
    let starting = SessionObs {
        stage: Stage::Starting,
        has_sandbox: true,
        ..claimed()
    };
    let near_deadline = SessionObs {
        claim_deadline: Some(NOW + 1_000),
        ..running()
    };
    for obs in [running(), finishing, starting, near_deadline] {
        assert_ne!(plan_session(&obs, &policy()), A::UpdateNetworkPolicy);
        let obs = changed(obs);
        assert_eq!(
            plan_session(&obs, &policy()),
            A::UpdateNetworkPolicy,
            "{obs:?}"
        );
    }
}

#[test]
fn a_policy_without_a_sandbox_or_a_reading_updates_nothing() {
    let no_sandbox = SessionObs {
        network_policy: Some(allow_only("example.com")),
        ..claimed()
    };
    assert_eq!(plan_session(&no_sandbox, &policy()), A::Start);
    let unread = SessionObs {
        network_policy: None,
        ..running()
    };
    assert_eq!(plan_session(&unread, &policy()), A::Wait);
    let nothing_applied = SessionObs {
        network_policy: Some(allow_only("example.com")),
        applied_policy: None,
        ..running()
    };
    assert_eq!(plan_session(&nothing_applied, &policy()), A::Wait);
    let done = SessionObs {
        stage: Stage::Done(Finish::Suspended),
        network_policy: Some(allow_only("example.com")),
        ..running()
    };
    assert_eq!(plan_session(&done, &policy()), A::Wait);
}

#[test]
fn the_applied_policy_follows_the_entry_only_until_a_sandbox_exists() {
    let old = NetworkPolicy::default();
    let new = allow_only("example.com");
    // The first reading is what the sandbox has.
    assert_eq!(track_applied_policy(None, &new, true), new);
    assert_eq!(track_applied_policy(None, &new, false), new);
    // Without a sandbox, the next one is created with the newest policy.
    assert_eq!(track_applied_policy(Some(&old), &new, false), new);
    // With one, only an update changes it.
    assert_eq!(track_applied_policy(Some(&old), &new, true), old);
}

#[test]
fn a_lost_claim_keeps_the_work_once_a_remote_was_started() {
    let cases = [
        (Stage::Claimed, Finish::Released),
        // Nothing ran in the sandbox yet: a snapshot of it would only
        // shadow the new holder's.
        (Stage::Starting, Finish::Released),
        (Stage::Running, Finish::Vanished),
        (Stage::Finishing(Finish::Suspended), Finish::Vanished),
    ];
    for (stage, finish) in cases {
        assert_eq!(finish_on_claim_lost(stage), finish, "{stage:?}");
    }
}

#[test]
fn renewals_are_paced_and_never_starve_the_start() {
    // Renewed a moment ago and still due (the answer had no token): wait,
    // do not re-claim in a loop, do not start without a token either.
    let just_renewed = SessionObs {
        has_connect_token: false,
        last_renewal_at: Some(NOW - 100),
        ..claimed()
    };
    assert_eq!(plan_session(&just_renewed, &policy()), A::Wait);
    let later = SessionObs {
        last_renewal_at: Some(NOW - MIN_RENEW_INTERVAL_MS),
        ..just_renewed.clone()
    };
    assert_eq!(plan_session(&later, &policy()), A::Renew);
    // A 6 s claim just renewed starts.
    let short = SessionObs {
        claim_deadline: Some(NOW + 6_000),
        claim_lifetime_ms: Some(6_000),
        last_renewal_at: Some(NOW),
        ..claimed()
    };
    assert_eq!(plan_session(&short, &policy()), A::Start);
    // A running session whose renewal just failed waits for the next try.
    let failed = SessionObs {
        claim_deadline: Some(NOW + 1_000),
        last_renewal_at: Some(NOW - 500),
        ..running()
    };
    assert_eq!(plan_session(&failed, &policy()), A::Wait);
}

// ---- a record waiting for room ----

#[test]
fn a_session_whose_record_waits_for_room_only_keeps_its_claim() {
    let near = |stage| SessionObs {
        stage,
        claim_deadline: Some(NOW + 60_000),
        ..running()
    };
    let far = |stage| SessionObs { stage, ..running() };
    for stage in [
        Stage::Claimed,
        Stage::Starting,
        Stage::Running,
        Stage::Finishing(Finish::Suspended),
        Stage::Finishing(Finish::Terminated),
    ] {
        assert_eq!(
            plan_unrecorded(&near(stage), &policy()),
            A::Renew,
            "{stage}"
        );
        // Nothing else, whatever plan_session would do next.
        assert_eq!(plan_unrecorded(&far(stage), &policy()), A::Wait, "{stage}");
    }
    let crashed = SessionObs {
        remote: RemoteObs::Exited(1),
        remote_stopped_at: Some(NOW - 600_000),
        ..running()
    };
    assert_eq!(plan_session(&crashed, &policy()), A::RestartRemote);
    assert_eq!(plan_unrecorded(&crashed, &policy()), A::Wait);
    // Paced like any renewal.
    let just_tried = SessionObs {
        last_renewal_at: Some(NOW - 500),
        ..near(Stage::Running)
    };
    assert_eq!(plan_unrecorded(&just_tried, &policy()), A::Wait);
    // A session done needs no claim.
    let done = near(Stage::Done(Finish::Terminated));
    assert_eq!(plan_unrecorded(&done, &policy()), A::Wait);
}
