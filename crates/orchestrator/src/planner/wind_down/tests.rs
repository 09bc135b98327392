use super::*;

fn obs(finish: Finish) -> WindDownObs {
    WindDownObs {
        finish,
        ran_remote: true,
        suspend_keeps_memory: false,
        suspend_failed: false,
        sandbox_gone: false,
    }
}

#[test]
fn each_finish_keeps_drops_and_gives_back_its_own_way() {
    use SnapshotReason as R;
    let stop = |keep_snapshot| Finish::Stopped { keep_snapshot };
    // (finish, snapshot, delete snapshots, release)
    let cases = [
        (Finish::Suspended, Some(R::Suspend), false, true),
        // Gone with no final status read: kept for recovery, nothing
        // deleted, nothing given back.
        (Finish::Vanished, Some(R::Recovery), false, false),
        (Finish::Failed, Some(R::Recovery), false, true),
        (Finish::Terminated, None, true, true),
        (Finish::Released, None, false, true),
        (stop(true), Some(R::Operator), false, true),
        (stop(false), None, true, true),
    ];
    for (finish, snapshot, delete_snapshots, release) in cases {
        let plan = plan_wind_down(&obs(finish));
        assert_eq!(
            plan,
            WindDown {
                snapshot,
                sandbox: SandboxEnd::Destroy,
                delete_snapshots,
                release,
            },
            "{finish:?}"
        );
    }
}

#[test]
fn an_operator_snapshot_needs_a_sandbox_a_remote_ran_in() {
    let half_made = WindDownObs {
        ran_remote: false,
        ..obs(Finish::Stopped {
            keep_snapshot: true,
        })
    };
    assert_eq!(plan_wind_down(&half_made).snapshot, None);
    // Other snapshots do not depend on it.
    let failed = WindDownObs {
        ran_remote: false,
        ..obs(Finish::Failed)
    };
    assert_eq!(
        plan_wind_down(&failed).snapshot,
        Some(SnapshotReason::Recovery)
    );
}

#[test]
fn only_a_suspended_session_keeps_its_sandbox_where_memory_is_kept() {
    let keeps = |finish| WindDownObs {
        suspend_keeps_memory: true,
        ..obs(finish)
    };
    assert_eq!(
        plan_wind_down(&keeps(Finish::Suspended)).sandbox,
        SandboxEnd::Suspend
    );
    assert_eq!(
        plan_wind_down(&obs(Finish::Suspended)).sandbox,
        SandboxEnd::Destroy
    );
    for finish in [Finish::Vanished, Finish::Failed, Finish::Terminated] {
        assert_eq!(
            plan_wind_down(&keeps(finish)).sandbox,
            SandboxEnd::Destroy,
            "{finish:?}"
        );
    }
    // A suspend that failed falls back to destroying (the snapshot stays).
    let failed = WindDownObs {
        suspend_failed: true,
        ..keeps(Finish::Suspended)
    };
    let plan = plan_wind_down(&failed);
    assert_eq!(plan.sandbox, SandboxEnd::Destroy);
    assert_eq!(plan.snapshot, Some(SnapshotReason::Suspend));
}

#[test]
fn a_sandbox_gone_before_its_snapshot_is_cleared_and_the_claim_given_back() {
    for finish in [Finish::Suspended, Finish::Vanished, Finish::Failed] {
        let gone = WindDownObs {
            sandbox_gone: true,
            suspend_keeps_memory: true,
            ..obs(finish)
        };
        let plan = plan_wind_down(&gone);
        assert_eq!(plan.snapshot, None, "{finish:?}");
        // Its remains go; what the finish gives back is given back.
        assert_eq!(plan.sandbox, SandboxEnd::Destroy, "{finish:?}");
        assert_eq!(plan.release, plan_wind_down(&obs(finish)).release);
        assert!(!plan.delete_snapshots, "{finish:?}");
    }
}

#[test]
fn a_session_gone_before_its_final_status_keeps_a_recovery_snapshot_and_says_why() {
    let plan = plan_wind_down(&obs(Finish::Vanished));
    // The snapshot comes first and the sandbox goes after it.
    assert_eq!(plan.snapshot, Some(SnapshotReason::Recovery));
    assert_eq!(plan.sandbox, SandboxEnd::Destroy);
    assert!(!plan.delete_snapshots);
    assert!(!plan.release);
    let note = finish_note(Finish::Vanished, &EntryObs::Gone);
    assert_eq!(note, Some(FinishNote::FinalStatusUnknown));
    let note = note.unwrap();
    assert_eq!(note.kind(), "final_status_unknown");
    assert!(note.reason().contains("404"), "{}", note.reason());
    assert!(
        note.reason().contains("recovery snapshot"),
        "{}",
        note.reason()
    );
}

#[test]
fn only_an_entry_gone_unread_is_noted() {
    use fleet::SessionStatus as S;
    // Another acceptor took the claim: the entry is there, `claim_lost`
    // says why.
    for entry in [
        EntryObs::Unknown,
        EntryObs::Present(S::Running),
        EntryObs::Present(S::Suspended),
    ] {
        assert_eq!(finish_note(Finish::Vanished, &entry), None, "{entry:?}");
    }
    // Every other end has its status read, or its own record of why.
    let stop = |keep_snapshot| Finish::Stopped { keep_snapshot };
    for finish in [
        Finish::Suspended,
        Finish::Terminated,
        Finish::Failed,
        Finish::Released,
        stop(true),
        stop(false),
    ] {
        assert_eq!(finish_note(finish, &EntryObs::Gone), None, "{finish:?}");
    }
}

#[test]
fn a_lost_session_found_gone_is_noted_once() {
    let note = lost_session_note(true, false).expect("noted");
    assert_eq!(note.kind(), "final_status_unknown");
    assert!(
        note.reason().contains("claim was lost"),
        "{}",
        note.reason()
    );
    // Said already (before a restart, or as the wind-down began).
    assert_eq!(lost_session_note(true, true), None);
    // Any other answer, or none: nothing to say yet.
    assert_eq!(lost_session_note(false, false), None);
}

#[test]
fn only_a_lost_session_whose_question_went_unanswered_is_asked_again() {
    // Vanished, or suspended with its release refused (only those asked).
    for lost in [
        Stage::Done(Finish::Vanished),
        Stage::Done(Finish::Suspended),
    ] {
        // Unanswered, alive when asked (bench chaos seed
        // 9342128893466662188: the last words of this host's stopped remote
        // arrived late and ended the session with no one serving it), or
        // terminated with the snapshots still recorded (the deletion
        // failed).
        for asked in ["unknown", "running", "suspended", "pending", "terminated"] {
            assert!(asks_again(lost, Some(asked), "gone"), "{lost:?} {asked}");
        }
        // Gone for good (kept for the retention period), or never asked.
        for answered in [Some("gone"), None] {
            assert!(!asks_again(lost, answered, "gone"), "{answered:?}");
        }
    }
    // Every other end deletes its snapshots itself, or keeps them by
    // design.
    for finish in [Finish::Terminated, Finish::Failed, Finish::Released] {
        assert!(
            !asks_again(Stage::Done(finish), Some("unknown"), "gone"),
            "{finish:?}"
        );
    }
}

#[test]
fn a_suspend_asks_when_its_release_is_refused_and_deletes_when_the_session_ended() {
    use fleet::ReleaseOutcome as R;
    use fleet::SessionStatus as S;
    let asleep = EntryObs::Present(S::Suspended);
    let ended = EntryObs::Present(S::Terminated);
    let s = Finish::Suspended;
    // Refused, gone from the queue, or unanswered: the claim may have
    // lapsed and the session ended elsewhere before the snapshot was stored.
    for outcome in [Some(R::NotHolder), Some(R::Gone), None] {
        for entry in [&asleep, &EntryObs::Unknown] {
            assert_eq!(
                after_release(s, outcome, entry),
                AfterRelease::Ask,
                "{outcome:?} {entry:?}"
            );
        }
    }
    assert_eq!(
        after_release(s, Some(R::Released), &asleep),
        AfterRelease::Keep
    );
    // Bench chaos, seed 20261202 (the suite beside a CPU hog): the claim
    // lapsed during the suspend, the session ended elsewhere, and this
    // host's renewal got the claim again, showing it terminated; its
    // release then went through and the late snapshot stayed.
    for outcome in [Some(R::Released), Some(R::NotHolder), Some(R::Gone), None] {
        assert_eq!(
            after_release(s, outcome, &ended),
            AfterRelease::Delete,
            "{outcome:?}"
        );
    }
    for finish in [
        Finish::Terminated,
        Finish::Vanished,
        Finish::Failed,
        Finish::Released,
    ] {
        assert_eq!(
            after_release(finish, Some(R::NotHolder), &ended),
            AfterRelease::Keep,
            "{finish:?}"
        );
    }
}
