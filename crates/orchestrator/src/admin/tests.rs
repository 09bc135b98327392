//! The admin listener: what needs the token beyond loopback, a path id
//! that fails the check, the session page's bounds, readiness, a port in
//! use, the Host headers let through.

use std::path::Path;

use std::time::Duration;

use super::*;
use crate::serving::Serving;

/// What a `serve` on `dir` shares, with `views`, keeping `min_free_bytes`
/// in reserve in `dir`.
fn serving(
    dir: &Path,
    views: Vec<Arc<crate::queue::QueueView>>,
    min_free_bytes: u64,
) -> Arc<Serving> {
    let store = Arc::new(crate::store::Store::open(&dir.join("garrison.db")).unwrap());
    Arc::new(Serving {
        acceptor_id: "me".into(),
        room: Arc::new(crate::room::StateRoom::new(
            dir,
            min_free_bytes,
            store.clone(),
        )),
        store,
        metrics: Default::default(),
        client: fleet::FleetClient::new("http://127.0.0.1:9", "t".into(), Default::default())
            .unwrap(),
        views,
        operator_stops: Default::default(),
    })
}

/// The routes as a listener beyond loopback serves them (`router`'s
/// flag; bound to loopback here, as tests must be).
async fn exposed_listener(dir: &Path, token: &str) -> String {
    let serving = serving(dir, vec![], 0);
    let state = AdminState {
        serving,
        outposts: vec![],
        sessions_dir: dir.join("sessions"),
        fresh_within: Duration::from_secs(1),
        started_at_ms: 0,
        version: "test",
        token: Secret::new(token),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(Arc::new(state), false);
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test]
async fn beyond_loopback_everything_but_health_and_the_dashboard_shell_needs_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = "t".repeat(64);
    let base = exposed_listener(dir.path(), &token).await;
    let http = reqwest::Client::new();
    let status = |path: &str, token: Option<&str>| {
        let mut req = http.get(format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    for open in ["/healthz", "/", "/assets/app.js", "/sessions/devin-1"] {
        assert_eq!(status(open, None).await, 200, "{open}");
    }
    for guarded in [
        "/api/status",
        "/api/sessions",
        "/api/session-page",
        "/metrics",
        "/readyz",
    ] {
        assert_eq!(status(guarded, None).await, 401, "{guarded}");
        assert_eq!(status(guarded, Some("wrong")).await, 401, "{guarded}");
        assert_ne!(status(guarded, Some(&token)).await, 401, "{guarded}");
    }
}

#[tokio::test]
async fn a_path_id_no_server_could_send_is_an_unknown_session() {
    let dir = tempfile::tempdir().unwrap();
    let token = "t".repeat(64);
    let base = exposed_listener(dir.path(), &token).await;
    let http = reqwest::Client::new();
    // Percent-encoded control character: refused by the id's check.
    for id in [
        "a%0Ab",
        &"x".repeat(fleet::MAX_SESSION_ID_LEN + 1),
        "devin-unknown",
    ] {
        for route in ["", "/events", "/log", "/stream"] {
            let res = http
                .get(format!("{base}/api/sessions/{id}{route}"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert_eq!(res.status().as_u16(), 404, "{id}{route}");
            let body: serde_json::Value = res.json().await.unwrap();
            assert_eq!(body["error"], "unknown session", "{id}{route}");
        }
        let res = http
            .post(format!("{base}/api/sessions/{id}/terminate"))
            .bearer_auth(&token)
            .json(&serde_json::json!({ "keep_snapshot": false }))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 404, "{id}/terminate");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["error"], "no such session", "{id}/terminate");
    }
}

#[tokio::test]
async fn the_session_page_is_bounded_and_refuses_bad_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let token = "t".repeat(64);
    let base = exposed_listener(dir.path(), &token).await;
    let store = crate::store::Store::open(&dir.path().join("garrison.db")).unwrap();
    for i in 0..120 {
        let rec = crate::store::SessionRecord::new(
            &fleet::SessionId::new(format!("s-{i:03}")).unwrap(),
            "op",
            fleet::SessionKind::New,
            "host",
            i,
        );
        store.put_session(&rec).unwrap();
    }
    let http = reqwest::Client::new();
    let get = |query: &str| {
        let req = http
            .get(format!("{base}/api/session-page{query}"))
            .bearer_auth(&token);
        async move {
            let res = req.send().await.unwrap();
            (
                res.status().as_u16(),
                res.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (code, page) = get("").await;
    assert_eq!(code, 200);
    let page: crate::api::SessionPage = serde_json::from_value(page).unwrap();
    assert_eq!(page.sessions.len(), listing::DEFAULT_LIMIT);
    assert_eq!((page.total, page.matched), (120, 120));
    assert_eq!(page.counts["claimed"], 120);
    assert_eq!(page.sessions[0].session_id, "s-119");

    let (_, page) = get("?offset=15&limit=50&q=S-1").await;
    let page: crate::api::SessionPage = serde_json::from_value(page).unwrap();
    assert_eq!(
        (page.sessions.len(), page.matched, page.total),
        (5, 20, 120)
    );
    assert_eq!(page.sessions[0].session_id, "s-104");

    let (code, body) = get("?limit=0").await;
    assert_eq!(code, 400);
    assert_eq!(body["error"], "limit must be between 1 and 500, not 0");
    let (code, body) = get("?stage=asleep").await;
    assert_eq!(code, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("stage \"asleep\"")
    );
}

#[test]
fn a_refused_queue_is_not_ready_however_fresh_its_view() {
    let dir = tempfile::tempdir().unwrap();
    let view = crate::queue::QueueView::new("op");
    let state = AdminState {
        serving: serving(dir.path(), vec![view.clone()], 0),
        outposts: vec![],
        sessions_dir: dir.path().join("sessions"),
        fresh_within: Duration::from_secs(3600),
        started_at_ms: 0,
        version: "test",
        token: Secret::new("t"),
    };
    let now = || chrono::Utc::now().timestamp_millis();
    assert!(
        state
            .readiness(now())
            .unwrap_err()
            .contains("not been listed")
    );
    view.mark_synced();
    assert_eq!(state.readiness(now()), Ok(()));
    let refused = fleet::FleetError::Unauthorized {
        route: "GET /devins",
    };
    assert!(view.refusal.note("op", "http://127.0.0.1:9", &refused));
    let why = state.readiness(now()).unwrap_err();
    assert!(
        why.starts_with("outpost op: ") && why.contains("(401)"),
        "{why}"
    );
    view.refusal.clear("op");
    assert_eq!(state.readiness(now()), Ok(()));
}

#[test]
fn a_state_directory_short_of_room_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let view = crate::queue::QueueView::new("op");
    view.mark_synced();
    // No file system has this much free: the reserve is never met.
    let serving = serving(dir.path(), vec![view], u64::MAX);
    let state = AdminState {
        serving: serving.clone(),
        outposts: vec![],
        sessions_dir: dir.path().join("sessions"),
        fresh_within: Duration::from_secs(3600),
        started_at_ms: 0,
        version: "test",
        token: Secret::new("t"),
    };
    let now = || chrono::Utc::now().timestamp_millis();
    assert_eq!(state.readiness(now()), Ok(()), "nothing read yet");
    assert!(serving.room.check().is_short());
    let why = state.readiness(now()).unwrap_err();
    let dir_text = dir.path().display().to_string();
    assert!(
        why.contains(&dir_text) && why.contains("state_dir_min_free_mb"),
        "{why}"
    );
}

#[test]
fn a_port_in_use_names_the_flag_that_sets_it() {
    let addr: SocketAddr = "127.0.0.1:9180".parse().unwrap();
    let text = bind_failure(addr, &std::io::Error::from(std::io::ErrorKind::AddrInUse));
    assert!(
        text.starts_with(
            "cannot start the admin listener on 127.0.0.1:9180 (--listen): the address is in use"
        ),
        "{text}"
    );
    assert!(text.contains("--listen 127.0.0.1:9181"), "{text}");
}

#[test]
fn only_local_host_headers_pass() {
    for ok in [
        "127.0.0.1:9180",
        "127.0.0.1",
        "localhost:9180",
        "LOCALHOST",
        "[::1]:9180",
        "app.localhost:1",
    ] {
        assert!(local_host_header(ok), "{ok}");
    }
    for bad in [
        "evil.example:9180",
        "evil.example",
        "127.0.0.1.nip.io:80",
        "[::1",
        "[::1]x",
    ] {
        assert!(!local_host_header(bad), "{bad}");
    }
}
