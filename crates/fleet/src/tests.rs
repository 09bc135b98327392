//! Client tests against tiny axum servers on 127.0.0.1, for behaviour the
//! emulator does not produce on demand: oversized and malformed bodies,
//! scripted 5xx, silent or hand-written SSE streams, awkward ids, paging
//! servers that never end. Timeouts in these tests only stop a hung test.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::error::FleetError;
use crate::session_id::SessionId;
use crate::{
    Backoff, ClaimError, ClientOptions, ConnectError, CreateOutpost, EventType, FleetClient,
    ListQuery, Platform, ReleaseOutcome, RetryPolicy, Secret, WatchItem,
};

/// A checked session id for the client's calls.
fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

const TOKEN: &str = "cog_unit_test_token_5f2a";

/// Upper bound that only stops a hung test.
const HANG: Duration = Duration::from_secs(30);

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    format!("http://{addr}")
}

/// Options with short backoffs so retries do not slow the suite.
fn fast() -> ClientOptions {
    ClientOptions {
        retry: RetryPolicy {
            attempts: 4,
            backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
        },
        watch_backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(20)),
        ..ClientOptions::default()
    }
}

fn client(base: &str, options: ClientOptions) -> FleetClient {
    FleetClient::new(base, Secret::new(TOKEN), options).unwrap()
}

fn entry(id: &str) -> Value {
    json!({
        "metadata": {"session_id": id, "outpost_id": "outpost_env-1", "created_at": 1_700_000_000.5},
        "spec": {"kind": "new", "platform": "linux"},
        "status": {"phase": "pending", "session_status": "pending"},
    })
}

fn page(items: Vec<Value>, cursor: Option<&str>, more: bool) -> Value {
    json!({"items": items, "cursor": cursor, "has_next_page": more, "total": null})
}

fn sse(chunks: Vec<&'static str>) -> Response {
    let stream = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, Infallible>(Bytes::from_static(c.as_bytes()))),
    );
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

fn query_param(query: &Option<String>, key: &str) -> Option<String> {
    let query = query.as_deref()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

// ----- body caps -----

#[tokio::test]
async fn body_over_cap_by_content_length_is_refused() {
    let big = format!("{{\"items\": [], \"pad\": \"{}\"}}", "x".repeat(4096));
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(move || async move { ([(header::CONTENT_TYPE, "application/json")], big) }),
    ))
    .await;
    let c = client(
        &base,
        ClientOptions {
            max_body_bytes: 1024,
            ..fast()
        },
    );
    let err = c.list_page(&ListQuery::new("o")).await.unwrap_err();
    assert!(
        matches!(err, FleetError::BodyTooLarge { limit: 1024, .. }),
        "{err:?}"
    );
    // A refused body is not a transient error: exactly one request.
    assert_eq!(c.stats().routes[crate::stats::route::LIST].requests, 1);
}

#[tokio::test]
async fn chunked_body_over_cap_is_refused_while_streaming() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins/{id}",
        get(|| async {
            // No Content-Length: 64 chunks of 100 bytes, then a body that
            // would never end; the client must stop at the cap.
            let head = futures::stream::iter(
                (0..64).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b' '; 100]))),
            );
            let body = head.chain(futures::stream::pending());
            Body::from_stream(body)
        }),
    ))
    .await;
    let c = client(
        &base,
        ClientOptions {
            max_body_bytes: 1024,
            ..fast()
        },
    );
    let err = tokio::time::timeout(HANG, c.get(&sid("devin-1")))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, FleetError::BodyTooLarge { .. }), "{err:?}");
}

#[tokio::test]
async fn default_cap_is_one_mebibyte() {
    assert_eq!(ClientOptions::default().max_body_bytes, 1 << 20);
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|| async {
            let chunks = (0..17).map(|_| Ok::<_, Infallible>(Bytes::from(vec![b' '; 64 * 1024])));
            Body::from_stream(futures::stream::iter(chunks))
        }),
    ))
    .await;
    let err = client(&base, fast())
        .list_page(&ListQuery::new("o"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, FleetError::BodyTooLarge { limit, .. } if limit == 1 << 20),
        "{err:?}"
    );
}

// ----- retries -----

#[derive(Clone, Default)]
struct Counter(Arc<AtomicUsize>);

impl Counter {
    fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn get_is_retried_on_503_and_429_then_succeeds() {
    let hits = Counter::default();
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/devins",
                get(|State(hits): State<Counter>| async move {
                    match hits.bump() {
                        1 => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                        2 => StatusCode::TOO_MANY_REQUESTS.into_response(),
                        _ => axum::Json(page(vec![entry("devin-1")], Some("c1"), false))
                            .into_response(),
                    }
                }),
            )
            .with_state(hits.clone()),
    )
    .await;
    let c = client(&base, fast());
    let page = c.list_page(&ListQuery::new("o")).await.unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(hits.get(), 3);
    let stats = &c.stats().routes[crate::stats::route::LIST];
    assert_eq!(stats.requests, 3);
    assert_eq!(stats.retries, 2);
    assert_eq!(stats.responses[&503], 1);
    assert_eq!(stats.responses[&429], 1);
    assert_eq!(stats.responses[&200], 1);
}

/// When the server saw each request, in order.
#[derive(Clone, Default)]
struct Arrivals(Arc<Mutex<Vec<std::time::Instant>>>);

impl Arrivals {
    fn note(&self) -> usize {
        let mut seen = self.0.lock().unwrap();
        seen.push(std::time::Instant::now());
        seen.len()
    }

    fn gaps(&self) -> Vec<Duration> {
        let seen = self.0.lock().unwrap();
        seen.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

/// A 503 or 429 with `Retry-After: 3` is waited out, measured where the
/// server saw the two requests (not a deadline on the client), for a GET and
/// for a claim (a POST, otherwise never retried: a refusal that says when to
/// come back was not acted on).
#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_for_gets_and_claims() {
    // The first request of each route is refused, the next answered.
    async fn first_refused(seen: &Arrivals, status: StatusCode, ok: Value) -> Response {
        if seen.note() == 1 {
            return (status, [(header::RETRY_AFTER, "3")], "slow down").into_response();
        }
        axum::Json(ok).into_response()
    }
    let list = Arrivals::default();
    let claim = Arrivals::default();
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/devins",
                get(|State(seen): State<Arrivals>| async move {
                    let ok = page(vec![entry("devin-1")], None, false);
                    first_refused(&seen, StatusCode::SERVICE_UNAVAILABLE, ok).await
                }),
            )
            .with_state(list.clone())
            .merge(
                Router::new()
                    .route(
                        "/opbeta/outposts/devins/{id}/claim",
                        post(|State(seen): State<Arrivals>| async move {
                            first_refused(&seen, StatusCode::TOO_MANY_REQUESTS, entry("devin-1"))
                                .await
                        }),
                    )
                    .with_state(claim.clone()),
            ),
    )
    .await;
    let c = client(&base, fast());
    let page = tokio::time::timeout(HANG, c.list_page(&ListQuery::new("o")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.items.len(), 1);
    let gaps = list.gaps();
    assert_eq!(gaps.len(), 1, "one retry");
    assert!(
        gaps[0] >= Duration::from_secs(3),
        "retried after {:?}",
        gaps[0]
    );

    tokio::time::timeout(HANG, c.claim(&sid("devin-1"), "acc"))
        .await
        .unwrap()
        .unwrap();
    let gaps = claim.gaps();
    assert_eq!(gaps.len(), 1, "the claim was tried again once");
    assert!(
        gaps[0] >= Duration::from_secs(3),
        "retried after {:?}",
        gaps[0]
    );
}

/// A 429 that outlasts the attempts reports the server's wait, for the
/// caller's own backoff.
#[tokio::test]
async fn a_refused_claim_carries_the_retry_after() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins/{id}/claim",
        post(|| async { (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "0")]) }),
    ))
    .await;
    let err = client(&base, fast())
        .claim(&sid("devin-1"), "acc")
        .await
        .unwrap_err();
    let ClaimError::Fleet(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.status_code(), Some(429));
    assert_eq!(e.retry_after(), Some(Duration::ZERO));
}

#[tokio::test]
async fn get_gives_up_after_the_configured_attempts() {
    let hits = Counter::default();
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/devins/{id}",
                get(|State(hits): State<Counter>| async move {
                    hits.bump();
                    (StatusCode::INTERNAL_SERVER_ERROR, "boom")
                }),
            )
            .with_state(hits.clone()),
    )
    .await;
    let err = client(&base, fast())
        .get(&sid("devin-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FleetError::Status { code: 500, body, .. } if body == "boom"),
        "{err:?}"
    );
    assert_eq!(hits.get(), 4);
}

#[tokio::test]
async fn posts_and_deletes_are_never_retried() {
    let hits = Counter::default();
    let unavailable = |State(hits): State<Counter>| async move {
        hits.bump();
        StatusCode::SERVICE_UNAVAILABLE
    };
    let base = serve(
        Router::new()
            .route("/opbeta/outposts/devins/{id}/claim", post(unavailable))
            .route("/opbeta/outposts/devins/{id}/release", post(unavailable))
            .route("/opbeta/outposts/outposts/{id}", delete(unavailable))
            .with_state(hits.clone()),
    )
    .await;
    let c = client(&base, fast());
    let err = c.claim(&sid("devin-1"), "acc").await.unwrap_err();
    assert!(
        matches!(err, ClaimError::Fleet(FleetError::Status { code: 503, .. })),
        "{err:?}"
    );
    assert_eq!(hits.get(), 1);
    let err = c.release(&sid("devin-1"), "acc").await.unwrap_err();
    assert_eq!(err.status_code(), Some(503));
    assert_eq!(hits.get(), 2);
    let err = c.delete_outpost("outpost_env-1").await.unwrap_err();
    assert_eq!(err.status_code(), Some(503));
    assert_eq!(hits.get(), 3);
}

#[tokio::test]
async fn transport_errors_are_retried_then_reported() {
    // Bind and drop a listener: connecting to its port is refused.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = client(&format!("http://127.0.0.1:{port}"), fast());
    let err = c.get(&sid("devin-1")).await.unwrap_err();
    assert!(matches!(err, FleetError::Transport { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("GET /devins/{session_id}: transport error: connection refused: "),
        "{text}"
    );
    let stats = &c.stats().routes[crate::stats::route::GET];
    assert_eq!(stats.requests, 4);
    assert_eq!(stats.errors["transport"], 4);
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins/{id}",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "never"
        }),
    ))
    .await;
    let c = client(
        &base,
        ClientOptions {
            request_timeout: Duration::from_millis(100),
            retry: RetryPolicy::none(),
            ..fast()
        },
    );
    let err = tokio::time::timeout(HANG, c.get(&sid("devin-1")))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            FleetError::Timeout {
                what: "request",
                ..
            }
        ),
        "{err:?}"
    );
}

// ----- status mapping -----

#[tokio::test]
async fn claim_and_release_outcomes() {
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/devins/{id}/claim",
                post(|Path(id): Path<String>| async move {
                    match id.as_str() {
                        "taken" => (StatusCode::CONFLICT, "held by another").into_response(),
                        "gone" => StatusCode::NOT_FOUND.into_response(),
                        _ => {
                            let mut e = entry(&id);
                            e["status"] = json!({
                                "phase": "claimed", "acceptor_id": "acc",
                                "claim_deadline": 1_700_000_300_000u64,
                                "connect_token": "ct_secret", "gateway_url": "ws://127.0.0.1:1/gw",
                            });
                            axum::Json(e).into_response()
                        }
                    }
                }),
            )
            .route(
                "/opbeta/outposts/devins/{id}/release",
                post(|Path(id): Path<String>| async move {
                    match id.as_str() {
                        "taken" => StatusCode::CONFLICT,
                        "gone" => StatusCode::NOT_FOUND,
                        _ => StatusCode::OK,
                    }
                }),
            ),
    )
    .await;
    let c = client(&base, fast());
    let claimed = c.claim(&sid("devin-1"), "acc").await.unwrap();
    assert_eq!(claimed.status.connect_token.unwrap().expose(), "ct_secret");
    assert_eq!(
        claimed.status.claim_deadline.unwrap().unix_millis(),
        1_700_000_300_000
    );
    assert!(
        c.claim(&sid("taken"), "acc")
            .await
            .unwrap_err()
            .is_conflict()
    );
    assert!(matches!(
        c.claim(&sid("gone"), "acc").await,
        Err(ClaimError::Fleet(FleetError::NotFound { .. }))
    ));
    assert_eq!(
        c.release(&sid("devin-1"), "acc").await.unwrap(),
        ReleaseOutcome::Released
    );
    assert_eq!(
        c.release(&sid("taken"), "acc").await.unwrap(),
        ReleaseOutcome::NotHolder
    );
    assert_eq!(
        c.release(&sid("gone"), "acc").await.unwrap(),
        ReleaseOutcome::Gone
    );
}

#[tokio::test]
async fn get_maps_404_to_none_and_refuses_invalid_entries() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins/{id}",
        get(|Path(id): Path<String>| async move {
            match id.as_str() {
                "missing" => StatusCode::NOT_FOUND.into_response(),
                "bad" => axum::Json(entry("")).into_response(),
                _ => axum::Json(entry(&id)).into_response(),
            }
        }),
    ))
    .await;
    let c = client(&base, fast());
    assert_eq!(c.get(&sid("missing")).await.unwrap(), None);
    assert_eq!(
        c.get(&sid("devin-1")).await.unwrap().unwrap().session_id(),
        "devin-1"
    );
    assert!(matches!(
        c.get(&sid("bad")).await,
        Err(FleetError::Decode { .. })
    ));
}

// ----- encoding -----

#[tokio::test]
async fn ids_are_percent_encoded_into_one_segment() {
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = |tag: &'static str| {
        move |State(seen): State<Arc<Mutex<Vec<String>>>>, Path(id): Path<String>| async move {
            seen.lock().unwrap().push(format!("{tag} {id}"));
            axum::Json(entry(&id))
        }
    };
    let base = serve(
        Router::new()
            .route("/opbeta/outposts/devins/{id}", get(record("get")))
            .route("/opbeta/outposts/devins/{id}/claim", post(record("claim")))
            .route(
                "/opbeta/outposts/devins/{id}/release",
                post(record("release")),
            )
            .with_state(seen.clone()),
    )
    .await;
    let c = client(&base, fast());
    for id in ["a/b?c", "../x", "sp ace#frag%2F", "ünï"] {
        assert_eq!(c.get(&sid(id)).await.unwrap().unwrap().session_id(), id);
        assert_eq!(c.claim(&sid(id), "acc").await.unwrap().session_id(), id);
        assert_eq!(
            c.release(&sid(id), "acc").await.unwrap(),
            ReleaseOutcome::Released
        );
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 12);
    assert_eq!(&seen[..3], ["get a/b?c", "claim a/b?c", "release a/b?c"]);
    assert!(matches!(
        c.get(&sid("..")).await,
        Err(FleetError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn list_query_parameters_are_encoded() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|RawQuery(q): RawQuery| async move {
            let mut e = entry("devin-1");
            e["metadata"]["outpost_id"] = json!(query_param(&q, "outpost"));
            e["status"]["acceptor_id"] = json!(query_param(&q, "acceptor_id"));
            let cursor = format!(
                "{}|{}|{}",
                query_param(&q, "phase").unwrap_or_default(),
                query_param(&q, "first").unwrap_or_default(),
                query_param(&q, "cursor").unwrap_or_default()
            );
            axum::Json(json!({"items": [e], "cursor": cursor, "has_next_page": false}))
        }),
    ))
    .await;
    let page = client(&base, fast())
        .list_page(
            &ListQuery::new("out&post=x")
                .phase(crate::Phase::Claimed)
                .acceptor_id("me+you")
                .first(5000)
                .cursor("c/1=2"),
        )
        .await
        .unwrap();
    assert_eq!(page.items[0].metadata.outpost_id, "out&post=x");
    assert_eq!(page.items[0].status.acceptor_id.as_deref(), Some("me+you"));
    assert_eq!(page.cursor.as_deref(), Some("claimed|200|c/1=2"));
}

// ----- listing -----

#[tokio::test]
async fn bad_items_are_skipped_not_fatal() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|| async {
            axum::Json(json!({
                "items": [entry("devin-1"), entry(""), 42, {"metadata": {}}, entry("a\u{7}b"), entry("devin-2")],
                "cursor": "c", "has_next_page": false, "total": 6,
            }))
        }),
    ))
    .await;
    let c = client(&base, fast());
    let page = c.list_page(&ListQuery::new("o")).await.unwrap();
    let ids: Vec<_> = page.items.iter().map(|e| e.session_id()).collect();
    assert_eq!(ids, ["devin-1", "devin-2"]);
    assert_eq!(page.skipped, 4);
    assert_eq!(page.total, Some(6));
    assert_eq!(c.stats().routes[crate::stats::route::LIST].skipped_items, 4);
}

#[tokio::test]
async fn list_all_follows_cursors_and_upserts_boundary_repeats() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|RawQuery(q): RawQuery| async move {
            let mut second = entry("devin-2");
            second["status"]["session_status"] = json!("running");
            let body = match query_param(&q, "cursor").as_deref() {
                None => page(vec![entry("devin-1"), entry("devin-2")], Some("p1"), true),
                // devin-2 repeats across the boundary, with a newer status.
                Some("p1") => page(vec![second, entry("devin-3")], Some("p2"), true),
                Some("p2") => page(vec![], None, false),
                Some(other) => panic!("unexpected cursor {other}"),
            };
            axum::Json(body)
        }),
    ))
    .await;
    let (entries, cursor) = client(&base, fast())
        .list_all("o", None, None)
        .await
        .unwrap();
    let ids: Vec<_> = entries.iter().map(|e| e.session_id()).collect();
    assert_eq!(ids, ["devin-1", "devin-2", "devin-3"]);
    assert_eq!(
        entries[1].status.session_status,
        crate::SessionStatus::Running
    );
    // The empty last page had no cursor: the last one seen is kept.
    assert_eq!(cursor.as_deref(), Some("p2"));
}

#[tokio::test]
async fn endless_paging_is_cut_off() {
    let n = Counter::default();
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/devins",
                get(|State(n): State<Counter>| async move {
                    let c = n.bump().to_string();
                    axum::Json(json!({"items": [], "cursor": c, "has_next_page": true}))
                }),
            )
            .with_state(n.clone()),
    )
    .await;
    let c = client(
        &base,
        ClientOptions {
            max_list_pages: 5,
            ..fast()
        },
    );
    let err = c.list_all("o", None, None).await.unwrap_err();
    assert!(matches!(err, FleetError::Paging { .. }), "{err:?}");
    assert_eq!(n.get(), 5);

    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|| async { axum::Json(json!({"items": [], "cursor": "same", "has_next_page": true})) }),
    ))
    .await;
    let err = client(&base, fast())
        .list_all("o", None, None)
        .await
        .unwrap_err();
    assert!(matches!(err, FleetError::Paging { .. }), "{err:?}");
}

/// Protocol page, `GET /devins`: several rows can share one `updated_at`,
/// and a server whose cursor is only that instant answers the same cursor
/// again (`>=` boundary). The relist must get past the tie, not abort.
#[tokio::test]
async fn list_all_gets_past_rows_sharing_one_updated_at() {
    // (id, updated_at) in keyset order; three rows share t=5.
    const ROWS: [(&str, u64); 5] = [
        ("devin-1", 1),
        ("devin-2", 5),
        ("devin-3", 5),
        ("devin-4", 5),
        ("devin-5", 6),
    ];
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|RawQuery(q): RawQuery| async move {
            let since: u64 = query_param(&q, "cursor").map_or(0, |c| c.parse().unwrap());
            let first: usize = query_param(&q, "first").unwrap().parse().unwrap();
            let rows: Vec<_> = ROWS
                .iter()
                .filter(|(_, t)| *t >= since)
                .take(first)
                .collect();
            let full = rows.len() == first;
            let cursor = if full { rows.last().unwrap().1 } else { 7 };
            let items = rows.iter().map(|(id, _)| entry(id)).collect();
            axum::Json(page(items, Some(&cursor.to_string()), full))
        }),
    ))
    .await;
    let c = client(
        &base,
        ClientOptions {
            list_page_size: 2,
            ..fast()
        },
    );
    let (entries, cursor) = c.list_all("o", None, None).await.unwrap();
    let ids: Vec<_> = entries.iter().map(|e| e.session_id()).collect();
    assert_eq!(ids, ["devin-1", "devin-2", "devin-3", "devin-4", "devin-5"]);
    assert_eq!(cursor.as_deref(), Some("7"));
}

/// A server that keeps saying `has_next_page` with new rows forever is cut
/// off by the item cap too, not only the page cap.
#[tokio::test]
async fn list_all_caps_the_items_it_collects() {
    let n = Counter::default();
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/devins",
                get(|State(n): State<Counter>| async move {
                    let i = n.bump();
                    let items = (0..3).map(|k| entry(&format!("devin-{i}-{k}"))).collect();
                    axum::Json(page(items, Some(&i.to_string()), true))
                }),
            )
            .with_state(n.clone()),
    )
    .await;
    let c = client(
        &base,
        ClientOptions {
            max_list_items: 7,
            ..fast()
        },
    );
    let err = c.list_all("o", None, None).await.unwrap_err();
    assert!(matches!(err, FleetError::Paging { .. }), "{err:?}");
    assert_eq!(n.get(), 3, "stopped once the cap was passed");
}

// ----- outposts -----

#[tokio::test]
async fn outposts_use_the_prefix_spelling_first() {
    let outpost = |id: &str| json!({"metadata": {"id": id, "name": id}, "spec": {"platform": "linux"}, "status": {"queue_depth": 1}});
    let long_hits = Counter::default();
    let base = serve(
        Router::new()
            // Only the prefix spelling exists; first/after paging, end_cursor.
            .route(
                "/opbeta/outposts",
                get(move |RawQuery(q): RawQuery| async move {
                    assert_eq!(query_param(&q, "first").as_deref(), Some("100"));
                    match query_param(&q, "after").as_deref() {
                        None => axum::Json(json!({"items": [outpost("o1"), "junk"], "end_cursor": "e1", "has_next_page": true})),
                        Some("e1") => axum::Json(json!({"items": [outpost("o2")], "end_cursor": null, "has_next_page": false})),
                        Some(other) => panic!("cursor {other}"),
                    }
                })
                .post(|axum::Json(body): axum::Json<Value>| async move {
                    (StatusCode::CREATED, axum::Json(json!({"metadata": {"outpost_id": "o3", "name": body["name"]}, "spec": {"platform": body["platform"]}})))
                }),
            )
            .route(
                "/opbeta/outposts/{id}",
                get(move |Path(id): Path<String>| async move {
                    if id == "o1" { axum::Json(outpost("o1")).into_response() } else { StatusCode::NOT_FOUND.into_response() }
                })
                .delete(|Path(id): Path<String>| async move {
                    if id == "o1" { StatusCode::NO_CONTENT } else { StatusCode::NOT_FOUND }
                }),
            )
            .route(
                "/opbeta/outposts/outposts",
                get(|State(h): State<Counter>| async move {
                    h.bump();
                    StatusCode::METHOD_NOT_ALLOWED
                }),
            )
            .with_state(long_hits.clone()),
    )
    .await;
    let c = client(&base, fast());
    let all = c.list_outposts().await.unwrap();
    let ids: Vec<_> = all.iter().map(|o| o.metadata.outpost_id.as_str()).collect();
    assert_eq!(ids, ["o1", "o2"]);
    // The prefix spelling is tried first and remembered: the documented
    // one is never asked.
    assert_eq!(long_hits.get(), 0);
    let created = c
        .create_outpost(&CreateOutpost {
            name: "lab".into(),
            platform: Platform::Linux,
            description: None,
        })
        .await
        .unwrap();
    assert_eq!(created.metadata.outpost_id, "o3");
    assert_eq!(created.spec.name, "lab");
    assert_eq!(
        c.get_outpost("o1")
            .await
            .unwrap()
            .unwrap()
            .status
            .queue_depth,
        1
    );
    assert_eq!(c.get_outpost("nope").await.unwrap(), None);
    c.delete_outpost("o1").await.unwrap();
    assert!(matches!(
        c.delete_outpost("nope").await,
        Err(FleetError::NotFound { .. })
    ));
    assert_eq!(long_hits.get(), 0);
}

#[tokio::test]
async fn outposts_fall_back_to_the_documented_spelling() {
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/outposts",
                get(|| async {
                    axum::Json(json!({"items": [{"metadata": {"outpost_id": "o1"}}], "cursor": null, "has_next_page": false}))
                }),
            )
            .route(
                "/opbeta/outposts/outposts/{id}",
                get(|| async { StatusCode::NOT_FOUND }),
            )
            // Would turn the answer below into an error if it were used.
            .route(
                "/opbeta/outposts/{id}",
                get(|| async { StatusCode::IM_A_TEAPOT }),
            ),
    )
    .await;
    let c = client(&base, fast());
    assert_eq!(c.list_outposts().await.unwrap().len(), 1);
    // Known spelling: a 404 now means "no such outpost", no fallback.
    assert_eq!(c.get_outpost("o9").await.unwrap(), None);
}

// ----- watch -----

const EV1: &str = "data: {\"type\":\"MODIFIED\",\"cursor\":\"c1\",\"object\":{\"metadata\":{\"session_id\":\"devin-1\"}}}\n\n";

#[tokio::test]
async fn watch_parses_multiline_data_comments_and_ends_with_the_stream() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|RawQuery(q): RawQuery| async move {
            assert_eq!(query_param(&q, "watch").as_deref(), Some("true"));
            assert_eq!(query_param(&q, "cursor").as_deref(), Some("c0"));
            sse(vec![
                ": keepalive\n\n",
                "event: update\nid: 1\n",
                EV1,
                // One event over three data lines, split mid-line across chunks.
                "data: {\"type\":\"DELETED\",\r\ndata: \"cursor\":\"c2\",\r\ndata: \"object\":{\"metadata\":",
                "{\"session_id\":\"devin-2\"}}}\r\n\r\n",
                // Skipped: not JSON, and an invalid entry.
                "data: nope\n\n",
                "data: {\"type\":\"MODIFIED\",\"cursor\":\"c3\",\"object\":{\"metadata\":{\"session_id\":\"\"}}}\n\n",
                ": keepalive\n",
                "data: {\"type\":\"MODIFIED\",\"cursor\":\"c4\",\"object\":{\"metadata\":{\"session_id\":\"devin-3\"}}}\n\n",
                // Unterminated event at the end: dropped.
                "data: {\"type\":\"MODIFIED\"",
            ])
        }),
    ))
    .await;
    let c = client(&base, fast());
    let events: Vec<_> = tokio::time::timeout(HANG, c.watch("o", Some("c0")).collect::<Vec<_>>())
        .await
        .unwrap();
    let events: Vec<_> = events.into_iter().map(Result::unwrap).collect();
    let got: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.event_type.clone(),
                e.object.session_id(),
                e.cursor.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (EventType::Modified, "devin-1", Some("c1")),
            (EventType::Deleted, "devin-2", Some("c2")),
            (EventType::Modified, "devin-3", Some("c4")),
        ]
    );
    assert_eq!(
        c.stats().routes[crate::stats::route::WATCH].skipped_items,
        2
    );
}

#[tokio::test]
async fn a_silent_watch_times_out() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|| async {
            let nothing = futures::stream::pending::<Result<Bytes, Infallible>>();
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                Body::from_stream(nothing),
            )
        }),
    ))
    .await;
    let c = client(
        &base,
        ClientOptions {
            watch_idle_timeout: Duration::from_millis(200),
            ..fast()
        },
    );
    let items: Vec<_> = tokio::time::timeout(HANG, c.watch("o", None).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(items.len(), 1);
    assert!(
        matches!(
            items[0],
            Err(FleetError::Timeout {
                what: "watch idle",
                ..
            })
        ),
        "{:?}",
        items[0]
    );
}

#[tokio::test]
async fn keepalives_keep_a_watch_alive() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|| async {
            // Keepalives every 100 ms for 2.5 s, longer than the 1 s idle
            // timeout: only because each one resets the timer does the
            // event after them arrive on the same connection.
            let keepalives = futures::stream::iter(0..25).then(|_| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok::<_, Infallible>(Bytes::from_static(b": keepalive\n"))
            });
            let event = futures::stream::iter([Ok(Bytes::from_static(EV1.as_bytes()))]);
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                Body::from_stream(keepalives.chain(event)),
            )
        }),
    ))
    .await;
    let c = client(
        &base,
        ClientOptions {
            watch_idle_timeout: Duration::from_secs(1),
            ..fast()
        },
    );
    let items: Vec<_> = tokio::time::timeout(HANG, c.watch("o", None).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].as_ref().unwrap().object.session_id(), "devin-1");
}

#[tokio::test]
async fn watch_http_errors_are_typed() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|| async { (StatusCode::FORBIDDEN, "missing scope") }),
    ))
    .await;
    let items: Vec<_> = client(&base, fast()).watch("o", None).collect().await;
    assert!(
        matches!(
            &items[..],
            [Err(FleetError::Forbidden {
                scope_hint: "account.outposts.machine",
                ..
            })]
        ),
        "{items:?}"
    );
}

#[tokio::test]
async fn watch_forever_resumes_from_the_last_processed_cursor() {
    let connections = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let base = serve(
        Router::new()
            .route(
                "/opbeta/outposts/devins",
                get(
                    |State(seen): State<Arc<Mutex<Vec<Option<String>>>>>, RawQuery(q): RawQuery| async move {
                        let n = {
                            let mut seen = seen.lock().unwrap();
                            seen.push(query_param(&q, "cursor"));
                            seen.len()
                        };
                        match n {
                            // Two events then a clean end.
                            1 => sse(vec![EV1, "data: {\"type\":\"MODIFIED\",\"cursor\":\"c2\",\"object\":{\"metadata\":{\"session_id\":\"devin-2\"}}}\n\n"]),
                            // A failure: the cursor must not move.
                            2 => StatusCode::BAD_GATEWAY.into_response(),
                            // A skipped event still moves the cursor.
                            3 => sse(vec!["data: {\"type\":\"MODIFIED\",\"cursor\":\"c3\",\"object\":{}}\n\n"]),
                            _ => sse(vec!["data: {\"type\":\"DELETED\",\"cursor\":\"c4\",\"object\":{\"metadata\":{\"session_id\":\"devin-1\"}}}\n\n"]),
                        }
                    },
                ),
            )
            .with_state(connections.clone()),
    )
    .await;
    let c = client(&base, fast());
    let mut watch = c.watch_forever("o", Some("c0".into()));
    let mut log = Vec::new();
    let mut deleted = false;
    while !deleted {
        let item = tokio::time::timeout(HANG, watch.next())
            .await
            .unwrap()
            .unwrap();
        log.push(match item {
            WatchItem::Event(e) => {
                deleted = e.event_type == EventType::Deleted;
                format!("event {}", e.object.session_id())
            }
            WatchItem::Disconnected { error, .. } => {
                format!("disconnected {}", error.map(|e| e.kind()).unwrap_or("eof"))
            }
            WatchItem::Reconnected { reconnects, cursor } => {
                format!("reconnected {reconnects} {}", cursor.unwrap_or_default())
            }
        });
    }
    assert_eq!(
        log,
        [
            "event devin-1",
            "event devin-2",
            "disconnected eof",
            "disconnected status",
            "reconnected 1 c2",
            "disconnected eof",
            "reconnected 2 c3",
            "event devin-1",
        ]
    );
    let cursors = connections.lock().unwrap().clone();
    assert_eq!(
        cursors,
        [
            Some("c0".into()),
            Some("c2".into()),
            Some("c2".into()),
            Some("c3".into())
        ]
    );
}

// ----- secrets -----

/// A server that echoes the token into every kind of response.
async fn leaky_server() -> String {
    let echo = format!("your token is {TOKEN}; Authorization: Bearer {TOKEN}");
    let e2 = echo.clone();
    let e3 = echo.clone();
    let e4 = echo.clone();
    let e5 = echo.clone();
    let router = Router::new()
        .route(
            "/opbeta/outposts/devins/{id}",
            get(move |Path(id): Path<String>, headers: HeaderMap| {
                let echo = e2.clone();
                async move {
                    // Sanity: the token did arrive as a bearer header.
                    assert_eq!(
                        headers[header::AUTHORIZATION].to_str().unwrap(),
                        format!("Bearer {TOKEN}")
                    );
                    match id.as_str() {
                        "401" => (StatusCode::UNAUTHORIZED, echo).into_response(),
                        "403" => (StatusCode::FORBIDDEN, echo).into_response(),
                        "500" => (StatusCode::INTERNAL_SERVER_ERROR, echo).into_response(),
                        "big" => {
                            (StatusCode::OK, format!("{echo}{}", " ".repeat(2048))).into_response()
                        }
                        "slow" => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            StatusCode::OK.into_response()
                        }
                        "decode" => {
                            (StatusCode::OK, axum::Json(json!({"metadata": TOKEN}))).into_response()
                        }
                        _ => (StatusCode::OK, format!("not json {echo}")).into_response(),
                    }
                }
            }),
        )
        .route(
            "/opbeta/outposts/devins/{id}/claim",
            post(move || {
                let echo = e3.clone();
                async move { (StatusCode::CONFLICT, echo) }
            }),
        )
        .route(
            "/opbeta/outposts/outposts",
            post(move || {
                let echo = e4.clone();
                async move { (StatusCode::CONFLICT, echo) }
            }),
        )
        .route(
            "/opbeta/outposts/outposts/{id}",
            delete(|| async { StatusCode::NOT_FOUND }),
        )
        .route(
            "/outposts/connection-token",
            post(move || {
                let echo = e5.clone();
                async move {
                    (
                        StatusCode::BAD_REQUEST,
                        axum::Json(json!({"error": "invalid_grant", "error_description": echo})),
                    )
                }
            }),
        )
        .route(
            "/opbeta/outposts/devins",
            get(|| async {
                axum::Json(json!({"items": [], "cursor": "same", "has_next_page": true}))
            }),
        );
    serve(router).await
}

fn assert_clean(what: &str, text: String) {
    assert!(!text.contains(TOKEN), "{what} leaks the token: {text}");
    assert!(
        !text.contains("5f2a"),
        "{what} leaks part of the token: {text}"
    );
}

#[tokio::test]
async fn the_token_never_appears_in_errors_or_logs() {
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'a> MakeWriter<'a> for Capture {
        type Writer = Capture;
        fn make_writer(&'a self) -> Capture {
            self.clone()
        }
    }
    let logs = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let base = leaky_server().await;
    let c = FleetClient::new(
        &base,
        Secret::new(TOKEN),
        ClientOptions {
            request_timeout: Duration::from_millis(200),
            max_body_bytes: 1024,
            max_list_pages: 3,
            ..fast()
        },
    )
    .unwrap();
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut record = |e: &dyn std::fmt::Debug, d: String| errors.push((format!("{e:?}"), d));

    let mut kinds = std::collections::BTreeSet::new();
    for id in ["401", "403", "500", "big", "slow", "decode", "text"] {
        let e = c.get(&sid(id)).await.unwrap_err();
        kinds.insert(e.kind());
        record(&e, e.to_string());
    }
    let e = c.claim(&sid("x"), "acc").await.unwrap_err();
    assert!(e.is_conflict());
    record(&e, e.to_string());
    let e = c
        .create_outpost(&CreateOutpost {
            name: "n".into(),
            platform: Platform::Linux,
            description: None,
        })
        .await
        .unwrap_err();
    kinds.insert(e.kind());
    record(&e, e.to_string());
    let e = c.delete_outpost("x").await.unwrap_err();
    kinds.insert(e.kind());
    record(&e, e.to_string());
    let e = c.list_all("o", None, None).await.unwrap_err();
    kinds.insert(e.kind());
    record(&e, e.to_string());
    let e = c.get(&sid("..")).await.unwrap_err();
    kinds.insert(e.kind());
    record(&e, e.to_string());
    let closed = FleetClient::new("http://127.0.0.1:1", Secret::new(TOKEN), fast()).unwrap();
    let e = closed.get(&sid("x")).await.unwrap_err();
    kinds.insert(e.kind());
    record(&e, e.to_string());
    let e = crate::pkce::exchange_code(&base, "code", &Secret::new(TOKEN))
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::InvalidGrant { .. }), "{e:?}");
    record(&e, e.to_string());
    let e = FleetClient::new(&base, Secret::new(format!("{TOKEN}\n")), fast()).unwrap_err();
    record(&e, e.to_string());

    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "body_too_large",
            "conflict",
            "decode",
            "forbidden",
            "invalid_argument",
            "not_found",
            "paging",
            "status",
            "timeout",
            "transport",
            "unauthorized",
        ]
    );
    for (debug, display) in errors {
        assert_clean("Debug", debug);
        assert_clean("Display", display);
    }
    assert_clean("client Debug", format!("{c:?}"));
    let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(!logs.is_empty(), "the capture saw no logs at all");
    assert_clean("logs", logs);
}

#[tokio::test]
async fn an_expired_cursor_is_typed_and_watch_forever_starts_over() {
    let base = serve(Router::new().route(
        "/opbeta/outposts/devins",
        get(|RawQuery(q): RawQuery| async move {
            match query_param(&q, "cursor").as_deref() {
                Some("old") => (StatusCode::GONE, "expired_cursor").into_response(),
                None => sse(vec![EV1]),
                Some(other) => panic!("unexpected cursor {other}"),
            }
        }),
    ))
    .await;
    let c = client(&base, fast());
    let items: Vec<_> = c.watch("o", Some("old")).collect().await;
    assert!(
        matches!(&items[..], [Err(FleetError::CursorExpired { .. })]),
        "{items:?}"
    );
    let mut watch = c.watch_forever("o", Some("old".into()));
    let first = tokio::time::timeout(HANG, watch.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            first,
            WatchItem::Disconnected {
                error: Some(FleetError::CursorExpired { .. }),
                ..
            }
        ),
        "{first:?}"
    );
    let second = tokio::time::timeout(HANG, watch.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(second, WatchItem::Reconnected { cursor: None, .. }),
        "{second:?}"
    );
    let third = tokio::time::timeout(HANG, watch.next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(third, WatchItem::Event(_)), "{third:?}");
}
