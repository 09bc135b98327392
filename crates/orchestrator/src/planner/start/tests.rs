use super::*;
use FreshReason as Why;
use StartPlan as P;

/// A new session's first start on a backend whose suspend keeps memory.
fn new_session() -> StartObs {
    StartObs {
        kind: SessionKind::New,
        sandbox_found: false,
        remote_recorded: false,
        suspend_keeps_memory: true,
        snapshot: SnapshotObs::NotLookedUp,
        corrupt_snapshot_starts_fresh: false,
        failed: None,
    }
}

fn resume() -> StartObs {
    StartObs {
        kind: SessionKind::Resume,
        ..new_session()
    }
}

#[test]
fn a_resume_reuses_the_sandbox_kept_suspended() {
    let kept = StartObs {
        sandbox_found: true,
        ..resume()
    };
    assert_eq!(plan_start(&kept), P::Reuse);
    assert!(P::Reuse.keeps_workspace());
}

#[test]
fn a_found_sandbox_that_is_not_the_kept_one_is_discarded() {
    let cases = [
        // A new session's sandbox left by an interrupted start.
        StartObs {
            sandbox_found: true,
            ..new_session()
        },
        // Where suspend keeps no memory nothing is kept to resume.
        StartObs {
            sandbox_found: true,
            suspend_keeps_memory: false,
            ..resume()
        },
        // A remote ran in it in this claim: not the suspended one.
        StartObs {
            sandbox_found: true,
            remote_recorded: true,
            ..resume()
        },
        // Resuming it failed for good.
        StartObs {
            sandbox_found: true,
            failed: Some(StartFailure::ResumeFailed),
            ..resume()
        },
    ];
    for case in cases {
        assert_eq!(plan_start(&case), P::Discard, "{case:?}");
    }
}

#[test]
fn without_a_sandbox_the_snapshot_is_looked_up_then_restored() {
    for obs in [new_session(), resume()] {
        assert_eq!(plan_start(&obs), P::FindSnapshot, "{obs:?}");
        let found = StartObs {
            snapshot: SnapshotObs::Available,
            ..obs
        };
        assert_eq!(plan_start(&found), P::Restore, "{found:?}");
    }
    assert!(P::Restore.keeps_workspace());
}

#[test]
fn a_kept_sandbox_gone_or_failed_falls_back_to_the_snapshot() {
    // Gone: the executor reports no sandbox any more.
    let gone = StartObs {
        sandbox_found: false,
        ..resume()
    };
    assert_eq!(plan_start(&gone), P::FindSnapshot);
    // Failed and then discarded.
    let discarded = StartObs {
        failed: Some(StartFailure::ResumeFailed),
        snapshot: SnapshotObs::Available,
        ..resume()
    };
    assert_eq!(plan_start(&discarded), P::Restore);
}

#[test]
fn with_nothing_to_restore_the_sandbox_is_fresh_and_says_why() {
    let none = |obs: StartObs| StartObs {
        snapshot: SnapshotObs::None,
        ..obs
    };
    assert_eq!(plan_start(&none(new_session())), P::Fresh(Why::New));
    assert_eq!(plan_start(&none(resume())), P::Fresh(Why::NoSnapshot));
    assert!(!P::Fresh(Why::New).keeps_workspace());
}

#[test]
fn a_snapshot_gone_at_restore_falls_back_to_a_fresh_sandbox() {
    for obs in [new_session(), resume()] {
        let gone = StartObs {
            snapshot: SnapshotObs::Available,
            failed: Some(StartFailure::RestoreGone),
            ..obs
        };
        assert_eq!(plan_start(&gone), P::Fresh(Why::SnapshotGone), "{gone:?}");
    }
}

#[test]
fn a_corrupt_snapshot_fails_the_start_unless_the_operator_allows_fresh() {
    for obs in [new_session(), resume()] {
        let corrupt = StartObs {
            snapshot: SnapshotObs::Available,
            failed: Some(StartFailure::RestoreCorrupt),
            ..obs
        };
        assert_eq!(plan_start(&corrupt), P::FailCorrupt, "{corrupt:?}");
        let allowed = StartObs {
            corrupt_snapshot_starts_fresh: true,
            ..corrupt
        };
        assert_eq!(plan_start(&allowed), P::Fresh(Why::SnapshotCorrupt));
    }
    assert!(!P::FailCorrupt.keeps_workspace());
}

#[test]
fn a_snapshot_that_cannot_be_restored_gives_the_session_up_and_keeps_it() {
    let failed = StartObs {
        snapshot: SnapshotObs::Available,
        failed: Some(StartFailure::RestoreUnrestorable),
        ..resume()
    };
    assert_eq!(plan_start(&failed), P::GiveUpUnrestorable);
    // Never a fresh start over the work the snapshot holds, whatever the
    // operator allows for a corrupt one.
    let lenient = StartObs {
        corrupt_snapshot_starts_fresh: true,
        ..failed.clone()
    };
    assert_eq!(plan_start(&lenient), P::GiveUpUnrestorable);
    // What the failed create left behind goes first.
    let left = StartObs {
        sandbox_found: true,
        suspend_keeps_memory: false,
        ..failed
    };
    assert_eq!(plan_start(&left), P::Discard);
    assert!(!P::GiveUpUnrestorable.keeps_workspace());
}
