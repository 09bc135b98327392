use super::*;
use fleet::{EntryMetadata, EntrySpec, EntryStatus};

/// A checked session id.
fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

const NOW: Millis = 1_000_000;

const ME: &str = "acceptor-me";

fn entry(id: &str, created: i64, phase: Phase, session_status: SessionStatus) -> QueueEntry {
    QueueEntry {
        metadata: EntryMetadata {
            session_id: fleet::SessionId::new(id).unwrap(),
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

fn entries(list: Vec<QueueEntry>) -> BTreeMap<SessionId, QueueEntry> {
    list.into_iter().map(|e| (e.id().clone(), e)).collect()
}

struct ClaimCase {
    entries: BTreeMap<SessionId, QueueEntry>,
    held: BTreeSet<SessionId>,
    lost: BTreeMap<SessionId, Option<Timestamp>>,
    cooldown: BTreeMap<SessionId, Millis>,
    finished_here: BTreeSet<SessionId>,
    released: BTreeMap<SessionId, Option<Timestamp>>,
    unrestorable: BTreeSet<SessionId>,
    capacity: usize,
    stopping: bool,
    short_of_room: bool,
}

impl ClaimCase {
    fn new(list: Vec<QueueEntry>) -> Self {
        Self {
            entries: entries(list),
            held: BTreeSet::new(),
            lost: BTreeMap::new(),
            cooldown: BTreeMap::new(),
            finished_here: BTreeSet::new(),
            released: BTreeMap::new(),
            unrestorable: BTreeSet::new(),
            capacity: 10,
            stopping: false,
            short_of_room: false,
        }
    }

    fn plan(&self) -> Vec<ClaimAction> {
        plan_claims(&ClaimObs {
            now: NOW,
            acceptor_id: ME,
            platform: &Platform::Linux,
            capacity: self.capacity,
            stopping: self.stopping,
            short_of_room: self.short_of_room,
            entries: &self.entries,
            held: &self.held,
            lost: &self.lost,
            cooldown: &self.cooldown,
            finished_here: &self.finished_here,
            released: &self.released,
            unrestorable: &self.unrestorable,
        })
    }
}

fn claim(id: &str) -> ClaimAction {
    ClaimAction::Claim(sid(id))
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
    case.held.insert(sid("held"));
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
        vec![ClaimAction::Adopt(sid("mine")), claim("new")]
    );
}

#[test]
fn expired_foreign_claims_are_claimable_unless_the_session_runs() {
    let mut expired = entry("expired", 1, Phase::Claimed, SessionStatus::Pending);
    expired.status.acceptor_id = Some("other".into());
    expired.status.claim_deadline = Timestamp::from_unix_millis(NOW - 1);
    let mut live = expired.clone();
    live.metadata.session_id = fleet::SessionId::new("live").unwrap();
    live.status.session_status = SessionStatus::Running;
    let mut valid = expired.clone();
    valid.metadata.session_id = fleet::SessionId::new("valid").unwrap();
    valid.status.claim_deadline = Timestamp::from_unix_millis(NOW + 1);
    let case = ClaimCase::new(vec![expired, live, valid]);
    assert_eq!(case.plan(), vec![claim("expired")]);
}

#[test]
fn a_lost_claim_is_retried_only_after_the_entry_changes() {
    let e = entry("x", 1, Phase::Pending, SessionStatus::Pending);
    let mut case = ClaimCase::new(vec![e.clone()]);
    case.lost.insert(sid("x"), e.metadata.updated_at);
    assert!(case.plan().is_empty());
    case.entries.get_mut("x").unwrap().metadata.updated_at = Timestamp::from_unix_millis(99);
    assert_eq!(case.plan(), vec![claim("x")]);
}

#[test]
fn a_session_marked_unrestorable_here_is_never_claimed_again() {
    let pending = entry("x", 1, Phase::Pending, SessionStatus::Pending);
    let mut expired = entry("y", 2, Phase::Claimed, SessionStatus::Pending);
    expired.status.acceptor_id = Some("them".into());
    expired.status.claim_deadline = Timestamp::from_unix_millis(NOW - 1);
    let mut case = ClaimCase::new(vec![pending, expired]);
    assert_eq!(case.plan(), vec![claim("x"), claim("y")]);
    case.unrestorable = BTreeSet::from([sid("x"), sid("y")]);
    // No cooldown runs out on it, and no change of the entry lifts it.
    assert!(case.plan().is_empty());
    case.entries.get_mut("x").unwrap().metadata.updated_at = Timestamp::from_unix_millis(99);
    assert!(case.plan().is_empty());
    // Our own claim on it (a crash between marking and releasing) is still
    // released once the store has it done.
    let mut held_here = ClaimCase::new(vec![ours("z", SessionStatus::Pending)]);
    held_here.unrestorable = BTreeSet::from([sid("z")]);
    held_here.finished_here = BTreeSet::from([sid("z")]);
    assert_eq!(held_here.plan(), vec![ClaimAction::Release(sid("z"))]);
}

#[test]
fn stopping_claims_nothing() {
    let mut case = ClaimCase::new(vec![entry("a", 1, Phase::Pending, SessionStatus::Pending)]);
    case.stopping = true;
    assert!(case.plan().is_empty());
}

#[test]
fn short_of_room_claims_and_adopts_nothing_but_still_releases() {
    let mut ours_done = entry("done-here", 2, Phase::Claimed, SessionStatus::Running);
    ours_done.status.acceptor_id = Some(ME.into());
    let mut ours_unknown = entry("unknown", 3, Phase::Claimed, SessionStatus::Running);
    ours_unknown.status.acceptor_id = Some(ME.into());
    let mut case = ClaimCase::new(vec![
        entry("a", 1, Phase::Pending, SessionStatus::Pending),
        ours_done,
        ours_unknown,
    ]);
    case.finished_here = BTreeSet::from([sid("done-here")]);
    assert_eq!(
        case.plan(),
        vec![
            ClaimAction::Adopt(sid("unknown")),
            claim("a"),
            ClaimAction::Release(sid("done-here"))
        ]
    );
    case.short_of_room = true;
    assert_eq!(case.plan(), vec![ClaimAction::Release(sid("done-here"))]);
    // Room back: the same queue is claimed as before.
    case.short_of_room = false;
    assert_eq!(case.plan().len(), 3);
}

#[test]
fn a_released_session_cools_down_before_it_is_claimed_again() {
    let mut case = ClaimCase::new(vec![entry("x", 1, Phase::Pending, SessionStatus::Pending)]);
    case.cooldown.insert(sid("x"), NOW + 1);
    assert!(case.plan().is_empty());
    case.cooldown.insert(sid("x"), NOW);
    assert_eq!(case.plan(), vec![claim("x")]);
}

#[test]
fn sessions_given_back_or_stopped_here_cool_down() {
    let cases = [
        (
            Stage::Done(Finish::Released),
            Some(NOW + RELEASE_COOLDOWN_MS),
        ),
        (Stage::Done(Finish::Failed), Some(NOW + RELEASE_COOLDOWN_MS)),
        (
            Stage::Done(Finish::Stopped {
                keep_snapshot: true,
            }),
            Some(NOW + OPERATOR_STOP_COOLDOWN_MS),
        ),
        (
            Stage::Done(Finish::Stopped {
                keep_snapshot: false,
            }),
            Some(NOW + OPERATOR_STOP_COOLDOWN_MS),
        ),
        (Stage::Done(Finish::Suspended), None),
        (Stage::Done(Finish::Terminated), None),
        (Stage::Done(Finish::Vanished), None),
        // Left running to the next Garrison, or stopped mid-way.
        (Stage::Running, None),
        (Stage::Claimed, None),
        (Stage::Finishing(Finish::Released), None),
    ];
    for (stage, until) in cases {
        assert_eq!(
            cooldown_until(RunnerEnd::Stage(stage), NOW),
            until,
            "{stage:?}"
        );
    }
}

#[test]
fn a_session_whose_record_failed_cools_down() {
    // Released or left to expire, it is not taken again at once by the
    // process whose store just failed.
    assert_eq!(
        cooldown_until(RunnerEnd::RecordFailed, NOW),
        Some(NOW + RELEASE_COOLDOWN_MS)
    );
}

fn ours(id: &str, session_status: SessionStatus) -> QueueEntry {
    let mut e = entry(id, 5, Phase::Claimed, session_status);
    e.status.acceptor_id = Some(ME.into());
    e
}

// Before the fix our own claims on finished sessions the store did not
// know (a lost state directory) were skipped and left to expire.
#[test]
fn our_claims_on_finished_or_unserved_sessions_are_released() {
    let release = |id: &str| ClaimAction::Release(sid(id));
    let mut case = ClaimCase::new(vec![
        ours("ended", SessionStatus::Terminated),
        ours("asleep", SessionStatus::Suspended),
        ours("done-here", SessionStatus::Running),
        ours("live", SessionStatus::Running),
        ours("held", SessionStatus::Terminated),
    ]);
    case.finished_here.insert(sid("done-here"));
    case.held.insert(sid("held"));
    assert_eq!(
        case.plan(),
        vec![
            ClaimAction::Adopt(sid("live")),
            release("asleep"),
            release("done-here"),
            release("ended"),
        ]
    );
    // Released once per change of the entry, not on every round.
    let seen = case.entries["ended"].metadata.updated_at;
    case.released.insert(sid("ended"), seen);
    assert!(!case.plan().contains(&release("ended")));
    // Releasing takes no capacity; stopping does not stop it.
    case.capacity = 0;
    case.stopping = true;
    assert_eq!(case.plan(), vec![release("asleep"), release("done-here")]);
}

#[test]
fn failed_claims_back_off_jittered_bounded_and_after_retry_after() {
    // No jitter: 1 s, 2 s, 4 s ... capped at the maximum.
    let plain: Vec<Millis> = (1..=9).map(|n| claim_retry_delay(n, None, 0.0)).collect();
    assert_eq!(
        plain,
        [
            1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000
        ]
    );
    assert_eq!(claim_retry_delay(u32::MAX, None, 0.0), CLAIM_RETRY_MAX_MS);
    // Full jitter takes up to half off, never more, never adds.
    assert_eq!(claim_retry_delay(3, None, 1.0), 2_000);
    for jitter in [0.0, 0.25, 0.5, 0.99, 1.0, 7.0, -1.0] {
        let d = claim_retry_delay(3, None, jitter);
        assert!((2_000..=4_000).contains(&d), "{jitter}: {d}");
    }
    // The server's Retry-After is a floor, even past the cap.
    assert_eq!(claim_retry_delay(1, Some(3_000), 0.0), 3_000);
    assert_eq!(claim_retry_delay(7, Some(90_000), 0.0), 90_000);
    // A session cooling down after a failed claim is not claimed.
    let mut case = ClaimCase::new(vec![entry("x", 1, Phase::Pending, SessionStatus::Pending)]);
    let until = NOW + claim_retry_delay(1, None, 0.5);
    case.cooldown.insert(sid("x"), until);
    assert!(case.plan().is_empty());
    case.cooldown.insert(sid("x"), NOW);
    assert_eq!(case.plan(), vec![claim("x")]);
}
