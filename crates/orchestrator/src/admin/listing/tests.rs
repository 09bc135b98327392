use super::*;
use crate::planner::{Finish, Stage};

fn record(id: &str, stage: Stage, claimed_at: i64) -> SessionRecord {
    let mut rec = SessionRecord::new(
        &fleet::SessionId::new(id).unwrap(),
        "op",
        fleet::SessionKind::New,
        "host",
        claimed_at,
    );
    rec.stage = stage;
    rec
}

/// 1,000 sessions: the 10 newest running, the rest terminated, claimed a
/// second apart (`s-0999` newest).
fn thousand() -> Vec<SessionRecord> {
    (0..1000)
        .map(|i| {
            let stage = if i >= 990 {
                Stage::Running
            } else {
                Stage::Done(Finish::Terminated)
            };
            record(&format!("s-{i:04}"), stage, i * 1000)
        })
        .collect()
}

fn ids(selection: &Selection<'_>) -> Vec<String> {
    selection
        .rows
        .iter()
        .map(|r| r.session_id.as_str().to_owned())
        .collect()
}

#[test]
fn no_parameters_ask_for_the_first_bounded_page() {
    assert_eq!(SessionQuery::parse("").unwrap(), SessionQuery::default());
    let records = thousand();
    let page = select(&records, &SessionQuery::default());
    assert_eq!(page.rows.len(), DEFAULT_LIMIT);
    assert_eq!((page.matched, page.total), (1000, 1000));
    assert_eq!(page.rows[0].session_id, "s-0999");
    assert_eq!(page.counts["running"], 10);
    assert_eq!(page.counts["terminated"], 990);
}

#[test]
fn pages_follow_each_other_without_overlap() {
    let records = thousand();
    let query = |raw: &str| SessionQuery::parse(raw).unwrap();
    let first = ids(&select(&records, &query("limit=100")));
    let second = ids(&select(&records, &query("limit=100&offset=100")));
    assert_eq!(first.len(), 100);
    assert_eq!(second[0], "s-0899");
    assert!(first.iter().all(|id| !second.contains(id)));
    let last = select(&records, &query("limit=100&offset=950"));
    assert_eq!(last.rows.len(), 50);
    let beyond = select(&records, &query("offset=5000"));
    assert!(beyond.rows.is_empty());
    assert_eq!(beyond.matched, 1000);
}

#[test]
fn equal_claim_times_order_by_session_id() {
    let records = vec![
        record("b", Stage::Running, 5),
        record("a", Stage::Running, 5),
        record("c", Stage::Running, 9),
    ];
    let page = select(&records, &SessionQuery::default());
    assert_eq!(ids(&page), ["c", "a", "b"]);
}

#[test]
fn filters_narrow_the_rows_but_not_the_counts() {
    let records = thousand();
    let query = |raw: &str| SessionQuery::parse(raw).unwrap();

    let running = select(&records, &query("stage=running"));
    assert_eq!((running.rows.len(), running.matched), (10, 10));
    assert_eq!(running.total, 1000);
    assert_eq!(running.counts["terminated"], 990);

    let active = select(&records, &query("status=active"));
    assert_eq!(active.matched, 10);
    let done = select(&records, &query("status=done&limit=500"));
    assert_eq!((done.rows.len(), done.matched), (500, 990));

    let either = select(&records, &query("stage=running,terminated"));
    assert_eq!(either.matched, 1000);
    assert_eq!(
        select(&records, &query("stage=running&status=done")).matched,
        0
    );

    let search = select(&records, &query("q=S-09"));
    assert_eq!(search.matched, 100);
    assert!(ids(&search).iter().all(|id| id.starts_with("s-09")));
    assert_eq!(select(&records, &query("q=0999")).matched, 1);
}

#[test]
fn suspended_counts_as_done() {
    let q = SessionQuery::parse("status=done").unwrap();
    assert!(q.matches("x", StageLabel::Suspended));
    assert!(!q.matches("x", StageLabel::Finishing));
    let q = SessionQuery::parse("status=active").unwrap();
    assert!(q.matches("x", StageLabel::Claimed));
    assert!(!q.matches("x", StageLabel::Suspended));
}

#[test]
fn parameters_are_decoded_and_empty_ones_are_ignored() {
    let q = SessionQuery::parse("offset=&limit=&stage=&status=&q=").unwrap();
    assert_eq!(q, SessionQuery::default());
    let q = SessionQuery::parse("q=Devin%2DAb&stage=running%2C%20starting&limit=500").unwrap();
    assert_eq!(q.search.as_deref(), Some("devin-ab"));
    assert_eq!(q.stages, [StageLabel::Running, StageLabel::Starting]);
    assert_eq!(q.limit, MAX_LIMIT);
}

#[test]
fn bad_parameters_are_refused_with_what_is_accepted() {
    let err = |raw: &str| SessionQuery::parse(raw).unwrap_err();
    assert_eq!(err("limit=0"), "limit must be between 1 and 500, not 0");
    assert_eq!(err("limit=501"), "limit must be between 1 and 500, not 501");
    assert_eq!(
        err("limit=ten"),
        "limit must be a whole number, not \"ten\""
    );
    assert_eq!(
        err("offset=-1"),
        "offset must be a whole number, not \"-1\""
    );
    assert_eq!(
        err("offset=99999999999999999999999"),
        "offset must be a whole number, not \"99999999999999999999999\""
    );
    assert_eq!(
        err("status=idle"),
        "status must be active or done, not \"idle\""
    );
    assert!(
        err("stage=running,sleeping")
            .starts_with("stage \"sleeping\" is not a stage (known: claimed, starting, running,")
    );
    assert_eq!(
        err("page=2"),
        "unknown parameter \"page\" (known: offset, limit, stage, status, q)"
    );
    assert_eq!(err("limit=5&limit=6"), "limit is given more than once");
    assert_eq!(
        err(&format!("q={}", "x".repeat(MAX_SEARCH_CHARS + 1))),
        "q must be at most 128 characters"
    );
    assert!(SessionQuery::parse(&format!("q={}", "x".repeat(MAX_SEARCH_CHARS))).is_ok());
    // A long bad value is quoted back shortened.
    assert_eq!(
        err(&format!("status={}", "y".repeat(1000))),
        format!("status must be active or done, not {:?}", "y".repeat(40))
    );
}
