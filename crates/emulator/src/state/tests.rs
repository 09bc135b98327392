//! Unit tests of the state transitions: paging, claims, expiry, lingering
//! rows, resume, the gateway's admission, PKCE codes and token scopes, all
//! driven with explicit `now` values against short timings.

use fleet::{EventType, Phase, Platform, SessionKind, SessionStatus};

use super::listing::Page;
use super::*;
use crate::model::{NewSession, Script, Step, Then};

const T0: i64 = 1_700_000_000_000;

fn state() -> (State, String) {
    let mut s = State::new(Timing {
        claim_ttl_ms: 1_000,
        linger_ms: 500,
        status_lag_ms: 100,
        connect_token_ttl_ms: 10_000,
        code_ttl_ms: 1_000,
    });
    let o = s.create_outpost("lab", Platform::Linux, None, T0);
    (s, o)
}

fn session(s: &mut State, outpost: &str, id: &str) -> String {
    s.create_session(
        NewSession {
            outpost_id: outpost.into(),
            session_id: Some(id.into()),
            ..Default::default()
        },
        T0,
    )
    .unwrap()
}

fn query(outpost: &str, first: usize, cursor: Option<&str>) -> ListQuery {
    ListQuery {
        outpost_id: Some(outpost.into()),
        phase: None,
        acceptor_id: None,
        first,
        cursor: cursor.map(|c| Stamp::parse_cursor(c).unwrap()),
    }
}

fn ids(p: &Page) -> Vec<&str> {
    p.items.iter().map(|e| e.session_id()).collect()
}

fn status(s: &State, id: &str) -> SessionStatus {
    s.sessions[id].status.clone()
}

/// Every change a watch from `cursor` would send, as (kind, id).
fn changes(s: &State, o: &str, cursor: Option<&str>) -> Vec<(EventType, String)> {
    let from = cursor.map(|c| Stamp::parse_cursor(c).unwrap());
    s.changes_from(Some(o), from, |_, _| false, 1000)
        .unwrap()
        .into_iter()
        .map(|c| (c.kind, c.object.session_id().to_owned()))
        .collect()
}

#[test]
fn paging_repeats_the_boundary_item_and_ends_with_a_watch_cursor() {
    let (mut s, o) = state();
    for i in 0..5 {
        session(&mut s, &o, &format!("devin-{i}"));
    }
    let p1 = s.list(&query(&o, 2, None)).unwrap();
    assert_eq!(ids(&p1), ["devin-0", "devin-1"]);
    assert!(p1.has_next_page);
    assert_eq!(p1.total, 5);
    let p2 = s.list(&query(&o, 2, Some(&p1.cursor))).unwrap();
    assert_eq!(ids(&p2), ["devin-1", "devin-2"]);
    let p3 = s.list(&query(&o, 2, Some(&p2.cursor))).unwrap();
    assert_eq!(ids(&p3), ["devin-2", "devin-3"]);
    let p4 = s.list(&query(&o, 2, Some(&p3.cursor))).unwrap();
    assert_eq!(ids(&p4), ["devin-3", "devin-4"]);
    // A full page may have more after it, as the service says.
    assert!(p4.has_next_page);
    let p5 = s.list(&query(&o, 2, Some(&p4.cursor))).unwrap();
    assert_eq!(ids(&p5), ["devin-4"]);
    assert!(!p5.has_next_page);
    assert_eq!(
        Stamp::parse_cursor(&p5.cursor),
        Some(s.head_stamp()),
        "the last cursor is where a watch goes on"
    );
}

/// As in the service, one row per page never gets past a row: the `>=`
/// boundary returns it again with the same cursor. Clients grow the page.
#[test]
fn paging_one_per_page_repeats_the_same_row() {
    let (mut s, o) = state();
    for i in 0..3 {
        session(&mut s, &o, &format!("devin-{i}"));
    }
    let p1 = s.list(&query(&o, 1, None)).unwrap();
    let p2 = s.list(&query(&o, 1, Some(&p1.cursor))).unwrap();
    assert_eq!(ids(&p1), ["devin-0"]);
    assert_eq!(ids(&p2), ["devin-0"]);
    assert_eq!(p1.cursor, p2.cursor);
    let p3 = s.list(&query(&o, 2, Some(&p2.cursor))).unwrap();
    assert_eq!(ids(&p3), ["devin-0", "devin-1"]);
}

#[test]
fn rows_are_ordered_by_updated_at_not_insertion() {
    let (mut s, o) = state();
    for i in 0..3 {
        session(&mut s, &o, &format!("devin-{i}"));
    }
    s.claim("devin-0", "a", T0).unwrap();
    let p = s.list(&query(&o, 10, None)).unwrap();
    assert_eq!(ids(&p), ["devin-1", "devin-2", "devin-0"]);
    let stamps: Vec<_> = p.items.iter().map(|e| e.metadata.updated_at).collect();
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{stamps:?}");
}

#[test]
fn list_and_watch_cursors_are_interchangeable() {
    let (mut s, o) = state();
    for i in 0..3 {
        session(&mut s, &o, &format!("devin-{i}"));
    }
    let p1 = s.list(&query(&o, 2, None)).unwrap();
    // A page cursor is a watch position: the boundary row comes again.
    let from_page = changes(&s, &o, Some(&p1.cursor));
    let ids: Vec<_> = from_page.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids, ["devin-1", "devin-2"]);
    // And a watch event's cursor pages a list.
    let all = s.changes_from(Some(&o), None, |_, _| false, 10).unwrap();
    let p = s
        .list(&query(&o, 10, Some(&all[1].stamp.cursor())))
        .unwrap();
    assert_eq!(super::tests::ids(&p), ["devin-1", "devin-2"]);
}

#[test]
fn final_cursor_watch_sees_changes_made_while_paging() {
    let (mut s, o) = state();
    for i in 0..3 {
        session(&mut s, &o, &format!("devin-{i}"));
    }
    let last = s.list(&query(&o, 10, None)).unwrap();
    s.claim("devin-0", "a", T0).unwrap();
    s.remove_entry("devin-2", T0);
    let seen = changes(&s, &o, Some(&last.cursor));
    assert_eq!(
        seen,
        [
            (EventType::Modified, "devin-0".to_owned()),
            (EventType::Deleted, "devin-2".to_owned()),
        ]
    );
}

#[test]
fn expired_cursors_are_gone_for_list_and_watch() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-0");
    let old = s.list(&query(&o, 10, None)).unwrap().cursor;
    s.expire_cursors();
    let from = Stamp::parse_cursor(&old);
    assert_eq!(
        s.list(&query(&o, 10, Some(&old))).unwrap_err(),
        StateError::Gone
    );
    assert_eq!(
        s.changes_from(Some(&o), from, |_, _| false, 10)
            .unwrap_err(),
        StateError::Gone
    );
    let fresh = s.list(&query(&o, 10, None)).unwrap();
    assert_eq!(ids(&fresh), ["devin-0"]);
    assert!(s.list(&query(&o, 10, Some(&fresh.cursor))).is_ok());
}

#[test]
fn filters_by_phase_and_acceptor() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-a");
    session(&mut s, &o, "devin-b");
    s.claim("devin-b", "w1", T0).unwrap();
    let mut q = query(&o, 100, None);
    q.phase = Some("claimed".into());
    q.acceptor_id = Some("w1".into());
    assert_eq!(ids(&s.list(&q).unwrap()), ["devin-b"]);
    q.acceptor_id = Some("w2".into());
    assert!(s.list(&q).unwrap().items.is_empty());
}

#[test]
fn claim_is_a_compare_and_swap() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    let (entry, token) = s.claim("devin-1", "a", T0).unwrap();
    assert_eq!(entry.status.phase, Phase::Claimed);
    assert_eq!(entry.status.acceptor_id.as_deref(), Some("a"));
    assert_eq!(entry.status.connect_token.unwrap().expose(), token);
    assert_eq!(
        entry.status.claim_deadline.unwrap().unix_millis(),
        T0 + 1_000
    );
    let err = s.claim("devin-1", "b", T0 + 10).unwrap_err();
    assert!(matches!(err, StateError::Conflict(_)));
    assert!(matches!(
        s.claim("devin-x", "a", T0),
        Err(StateError::NotFound(_))
    ));
}

#[test]
fn reclaim_by_holder_renews_with_a_fresh_token() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    let (_, t1) = s.claim("devin-1", "a", T0).unwrap();
    let (e, t2) = s.claim("devin-1", "a", T0 + 500).unwrap();
    assert_ne!(t1, t2);
    assert_eq!(e.status.claim_deadline.unwrap().unix_millis(), T0 + 1_500);
    // The first token stays valid for the session.
    assert!(
        s.gateway_open(Some(&t1), Some("devin-1"), 1, None, T0 + 600)
            .is_ok()
    );
}

#[test]
fn lazy_expiry_returns_idle_claims_but_keeps_running_sessions() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-idle");
    session(&mut s, &o, "devin-live");
    s.claim("devin-idle", "a", T0).unwrap();
    let (_, token) = s.claim("devin-live", "a", T0).unwrap();
    s.gateway_open(Some(&token), Some("devin-live"), 1, None, T0)
        .unwrap();
    assert_eq!(status(&s, "devin-live"), SessionStatus::Running);

    let later = T0 + 5_000;
    s.expire_claims(later);
    let idle = s.render("devin-idle").unwrap();
    assert_eq!(idle.status.phase, Phase::Pending);
    assert_eq!(idle.status.acceptor_id, None);
    let live = s.render("devin-live").unwrap();
    assert_eq!(live.status.phase, Phase::Claimed);
    assert!(matches!(
        s.claim("devin-live", "b", later),
        Err(StateError::Conflict(_))
    ));
    assert!(s.claim("devin-idle", "b", later).is_ok());
    // The holder of the running session may still renew.
    assert!(s.claim("devin-live", "a", later).is_ok());
}

#[test]
fn expired_claim_on_a_non_running_session_can_be_taken_over() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    s.claim("devin-1", "a", T0).unwrap();
    // Without a lazy sweep in between the CAS itself honours expiry.
    let (e, _) = s.claim("devin-1", "b", T0 + 1_000).unwrap();
    assert_eq!(e.status.acceptor_id.as_deref(), Some("b"));
}

#[test]
fn release_needs_the_holder_and_an_entry() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    assert!(matches!(
        s.release("devin-1", "a", T0),
        Err(StateError::Conflict(_))
    ));
    s.claim("devin-1", "a", T0).unwrap();
    assert!(matches!(
        s.release("devin-1", "b", T0),
        Err(StateError::Conflict(_))
    ));
    let e = s.release("devin-1", "a", T0).unwrap();
    assert_eq!(e.status.phase, Phase::Pending);
    assert_eq!(e.status.acceptor_id, None);
    s.remove_entry("devin-1", T0);
    assert!(matches!(
        s.release("devin-1", "a", T0),
        Err(StateError::NotFound(_))
    ));
}

#[test]
fn released_finished_rows_linger_then_are_deleted() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    let (_, token) = s.claim("devin-1", "a", T0).unwrap();
    s.gateway_open(Some(&token), Some("devin-1"), 1, None, T0)
        .unwrap();
    s.request_stop("devin-1", Stop::End, T0).unwrap();
    s.gateway_closed("devin-1", 1, "closed", T0 + 10);
    s.tick(T0 + 50);
    assert_eq!(status(&s, "devin-1"), SessionStatus::Running, "status lags");
    s.tick(T0 + 110);
    assert_eq!(status(&s, "devin-1"), SessionStatus::Terminated);

    s.release("devin-1", "a", T0 + 200).unwrap();
    let row = s.render("devin-1").unwrap();
    assert_eq!(row.status.phase, Phase::Pending);
    assert_eq!(row.status.session_status, SessionStatus::Terminated);
    s.tick(T0 + 600);
    assert!(s.render("devin-1").is_some(), "still lingering");
    let before = s.list(&query(&o, 10, None)).unwrap().cursor;
    s.tick(T0 + 700);
    assert!(s.render("devin-1").is_none());
    let evs = changes(&s, &o, Some(&before));
    assert_eq!(evs, [(EventType::Deleted, "devin-1".to_owned())]);
}

#[test]
fn replay_from_a_cursor_sees_the_latest_state_of_each_row() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    session(&mut s, &o, "devin-2");
    let cursor = s.list(&query(&o, 10, None)).unwrap().cursor;
    s.claim("devin-1", "a", T0).unwrap();
    s.release("devin-1", "a", T0).unwrap();
    s.remove_entry("devin-1", T0);
    // Keyset over the rows: one change per row, its latest.
    assert_eq!(
        changes(&s, &o, Some(&cursor)),
        [(EventType::Deleted, "devin-1".to_owned())]
    );
    let from_start = changes(&s, &o, None);
    assert_eq!(
        from_start,
        [
            (EventType::Modified, "devin-2".to_owned()),
            (EventType::Deleted, "devin-1".to_owned()),
        ]
    );
}

#[test]
fn resume_enqueues_a_new_entry_only_when_suspended() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    let script = Script {
        steps: vec![Step::Run {
            command: "true".into(),
        }],
        then: Then::End,
    };
    assert!(matches!(
        s.resume("devin-1", script.clone(), T0),
        Err(StateError::Conflict(_))
    ));
    s.request_stop("devin-1", Stop::Sleep, T0).unwrap();
    s.tick(T0 + 100);
    assert_eq!(status(&s, "devin-1"), SessionStatus::Suspended);
    s.remove_entry("devin-1", T0 + 100);

    s.resume("devin-1", script.clone(), T0 + 200).unwrap();
    let row = s.render("devin-1").unwrap();
    assert_eq!(row.spec.kind, SessionKind::Resume);
    assert_eq!(row.status.phase, Phase::Pending);
    assert_eq!(row.status.session_status, SessionStatus::Pending);
    assert_eq!(s.sessions["devin-1"].script, script);
}

#[test]
fn gateway_admits_one_remote_with_the_right_token() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    session(&mut s, &o, "devin-2");
    let (_, token) = s.claim("devin-1", "a", T0).unwrap();
    assert_eq!(
        s.gateway_open(None, Some("devin-1"), 1, None, T0),
        Err(GatewayRefusal::Unauthorized)
    );
    assert_eq!(
        s.gateway_open(Some("ct_nope"), Some("devin-1"), 1, None, T0),
        Err(GatewayRefusal::Unauthorized)
    );
    assert_eq!(
        s.gateway_open(Some(&token), Some("devin-2"), 1, None, T0),
        Err(GatewayRefusal::Forbidden)
    );
    assert_eq!(
        s.gateway_open(Some(&token), Some("devin-1"), 1, None, T0 + 20_000),
        Err(GatewayRefusal::Forbidden),
        "expired"
    );
    s.gateway_open(Some(&token), Some("devin-1"), 1, None, T0)
        .unwrap();
    assert_eq!(
        s.gateway_open(Some(&token), Some("devin-1"), 2, None, T0),
        Err(GatewayRefusal::Duplicate)
    );
    assert_eq!(
        s.view("devin-1")
            .unwrap()
            .events("duplicate_connection")
            .count(),
        1
    );
    s.gateway_closed("devin-1", 1, "closed", T0);
    assert!(
        s.gateway_open(Some(&token), Some("devin-1"), 3, None, T0)
            .is_ok()
    );
}

fn approval(callback: &str, name: &str) -> Approval {
    Approval {
        callback_url: callback.into(),
        challenge: "chal".into(),
        outpost_name: name.into(),
        platform: Platform::Linux,
    }
}

const CALLBACK: &str = "http://127.0.0.1:8791/devin/outpost-callback";

/// Devin's partners page, steps 3 and 5: the allowlist and a free name are
/// checked at approval; the outpost and service user exist only once the
/// code is redeemed, once, with the machine scope only.
#[test]
fn pkce_codes_are_single_use_bound_to_the_challenge_and_create_at_redemption() {
    let (mut s, _) = state();
    s.allow_callback(CALLBACK);
    assert!(s.callback_allowed("HTTP://127.0.0.1:8791/devin/outpost-callback"));
    assert_eq!(
        s.approve_connection(&approval("http://127.0.0.1:9/cb", "new"), T0),
        Err(ApproveError::CallbackNotAllowed)
    );
    assert_eq!(
        s.approve_connection(&approval(CALLBACK, "lab"), T0),
        Err(ApproveError::NameTaken),
        "the name is taken by the outpost state() made"
    );
    let code = s
        .approve_connection(&approval(CALLBACK, "new"), T0)
        .unwrap();
    assert!(
        s.outpost_by_name("new").is_none(),
        "nothing before redemption"
    );
    assert!(s.service_users.is_empty());
    let redeemed = s.redeem_code(&code, "chal", T0).unwrap();
    assert_eq!(redeemed.outpost.name, "new");
    assert_eq!(
        s.service_users[&redeemed.service_user_id],
        redeemed.outpost.id
    );
    assert_eq!(
        s.check_account_token(&redeemed.token, &[SCOPE_MACHINE]),
        Ok(())
    );
    assert_eq!(
        s.check_account_token(&redeemed.token, &[SCOPE_ORCHESTRATOR]),
        Err(AuthError::Forbidden),
        "machine scope only"
    );
    assert_eq!(
        s.redeem_code(&code, "chal", T0).unwrap_err(),
        GrantError::InvalidGrant,
        "replayed"
    );
    let code = s.approve_connection(&approval(CALLBACK, "n2"), T0).unwrap();
    assert!(s.redeem_code(&code, "other", T0).is_err(), "wrong verifier");
    assert_eq!(
        s.redeem_code(&code, "chal", T0).unwrap_err(),
        GrantError::InvalidGrant,
        "the failed attempt used the code up"
    );
    assert!(s.outpost_by_name("n2").is_none());
}

/// "stores an encrypted, single-use code (10-minute TTL)": with the
/// protocol's own TTL and an injected clock, a code redeems just before
/// ten minutes and not at ten.
#[test]
fn pkce_codes_expire_after_ten_minutes() {
    let mut s = State::new(Timing::default());
    s.allow_callback(CALLBACK);
    let late = s
        .approve_connection(&approval(CALLBACK, "late"), T0)
        .unwrap();
    let timely = s
        .approve_connection(&approval(CALLBACK, "timely"), T0)
        .unwrap();
    assert_eq!(
        s.redeem_code(&late, "chal", T0 + 600_000).unwrap_err(),
        GrantError::InvalidGrant
    );
    assert!(s.outpost_by_name("late").is_none());
    assert!(s.redeem_code(&timely, "chal", T0 + 599_999).is_ok());
}

/// A name free at approval but taken before redemption is refused then.
#[test]
fn a_name_taken_between_approval_and_redemption_is_refused() {
    let (mut s, _) = state();
    s.allow_callback(CALLBACK);
    let code = s
        .approve_connection(&approval(CALLBACK, "race"), T0)
        .unwrap();
    s.create_outpost("race", Platform::Linux, None, T0);
    assert_eq!(
        s.redeem_code(&code, "chal", T0).unwrap_err(),
        GrantError::NameTaken
    );
}

#[test]
fn account_token_scopes() {
    let (mut s, _) = state();
    let machine = s.mint_account_token(&[SCOPE_MACHINE]);
    assert_eq!(s.check_account_token(&machine, &[SCOPE_MACHINE]), Ok(()));
    assert_eq!(
        s.check_account_token(&machine, &[SCOPE_ORCHESTRATOR]),
        Err(AuthError::Forbidden)
    );
    assert_eq!(
        s.check_account_token("cog_unknown", &[SCOPE_MACHINE]),
        Err(AuthError::Unauthorized)
    );
    // Devin's reference, "Authentication": the orchestrator scope "implies
    // the machine scope".
    let orchestrator = s.mint_account_token(&[SCOPE_ORCHESTRATOR]);
    assert_eq!(
        s.check_account_token(&orchestrator, &[SCOPE_MACHINE]),
        Ok(())
    );
    let none = s.mint_account_token(&[]);
    assert_eq!(
        s.check_account_token(&none, &[SCOPE_MACHINE]),
        Err(AuthError::Forbidden)
    );
}

#[test]
fn outposts_count_pending_and_claimed_rows() {
    let (mut s, o) = state();
    session(&mut s, &o, "devin-1");
    session(&mut s, &o, "devin-2");
    s.claim("devin-1", "a", T0).unwrap();
    let out = s.outpost(&o).unwrap();
    assert_eq!(out.status.queue_depth, 1);
    assert_eq!(out.status.active_claims, 1);
    s.delete_outpost(&o, T0).unwrap();
    assert!(s.entries.is_empty());
}

/// Devin's reference, "List queued sessions": `outpost` is a filter that
/// "Applies to both list and watch". Without it the account's rows are
/// listed; an unknown outpost matches nothing (no 404).
#[test]
fn outpost_is_a_filter_on_list_and_watch() {
    let (mut s, o) = state();
    let other = s.create_outpost("other", Platform::Linux, None, T0);
    session(&mut s, &o, "devin-1");
    session(&mut s, &other, "devin-2");
    let mut q = query(&o, 10, None);
    assert_eq!(ids(&s.list(&q).unwrap()), ["devin-1"]);
    q.outpost_id = None;
    assert_eq!(ids(&s.list(&q).unwrap()), ["devin-1", "devin-2"]);
    q.outpost_id = Some("outpost_env-unknown".into());
    let page = s.list(&q).unwrap();
    assert!(page.items.is_empty());
    assert_eq!(page.total, 0);
    let all = s.changes_from(None, None, |_, _| false, 10).unwrap();
    assert_eq!(all.len(), 2);
    let none = s
        .changes_from(Some("outpost_env-unknown"), None, |_, _| false, 10)
        .unwrap();
    assert!(none.is_empty());
}
