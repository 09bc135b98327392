//! The emulator's HTTP surface, exercised over 127.0.0.1 with plain reqwest
//! and a hand-driven websocket remote: what a fleet client, an orchestrator
//! and `devin-remote` each observe.

use std::collections::BTreeSet;
use std::time::Duration;

use emulator::{
    Emulator, EmulatorConfig, Faults, NewSession, SCOPE_MACHINE, SCOPE_ORCHESTRATOR, Script, Step,
    Then,
};
use fleet::{Platform, SessionStatus, TimestampFormat};
use futures::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};

/// Stops a hung test; no assertion depends on it.
const PATIENCE: Duration = Duration::from_secs(20);

fn config() -> EmulatorConfig {
    EmulatorConfig {
        keepalive: Duration::from_millis(50),
        linger: Duration::from_millis(100),
        status_lag: Duration::from_millis(20),
        remote_binary: Some(std::path::PathBuf::from("/nonexistent/devin-remote-sim")),
        ..EmulatorConfig::default()
    }
}

async fn start() -> (Emulator, String) {
    start_with(config()).await
}

async fn start_with(config: EmulatorConfig) -> (Emulator, String) {
    let emu = Emulator::start(config).await.unwrap();
    let outpost = emu.create_outpost("lab", Platform::Linux);
    (emu, outpost)
}

fn session(emu: &Emulator, outpost: &str, id: &str, script: Script) -> String {
    emu.create_session(NewSession {
        outpost_id: outpost.into(),
        session_id: Some(id.into()),
        script,
        ..Default::default()
    })
    .unwrap()
}

fn api(emu: &Emulator, path: &str) -> String {
    format!("{}/opbeta/outposts{path}", emu.base_url())
}

async fn get_json(emu: &Emulator, path: &str) -> (StatusCode, Value) {
    let resp = reqwest::Client::new()
        .get(api(emu, path))
        .bearer_auth(emu.account_token())
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn post_json(emu: &Emulator, path: &str, body: Value) -> (StatusCode, Value) {
    let resp = reqwest::Client::new()
        .post(api(emu, path))
        .bearer_auth(emu.account_token())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn claim(emu: &Emulator, id: &str, acceptor: &str) -> (StatusCode, Value) {
    post_json(
        emu,
        &format!("/devins/{id}/claim"),
        json!({"acceptor_id": acceptor}),
    )
    .await
}

/// Polls `check` until it holds; panics after [`PATIENCE`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn auth_is_401_without_a_known_token_and_403_without_the_scope() {
    let (emu, outpost) = start().await;
    let client = reqwest::Client::new();
    let list = api(&emu, &format!("/devins?outpost={outpost}"));

    let none = client.get(&list).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    let unknown = client
        .get(&list)
        .bearer_auth("cog_nope")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), StatusCode::UNAUTHORIZED);

    let scopeless = emu.mint_token(&[]);
    let r = client
        .get(&list)
        .bearer_auth(&scopeless)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    let machine = emu.mint_token(&[SCOPE_MACHINE]);
    let r = client
        .get(&list)
        .bearer_auth(&machine)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let create = client
        .post(api(&emu, ""))
        .bearer_auth(&machine)
        .json(&json!({"name": "x", "platform": "linux"}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::FORBIDDEN);

    let orchestrator = emu.mint_token(&[SCOPE_ORCHESTRATOR]);
    let create = client
        .post(api(&emu, "/outposts"))
        .bearer_auth(&orchestrator)
        .json(&json!({"name": "x", "platform": "linux"}))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::CREATED);
    let made: fleet::Outpost = create.json().await.unwrap();
    let delete = client
        .delete(api(&emu, &format!("/{}", made.metadata.outpost_id)))
        .bearer_auth(&orchestrator)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn list_pages_overlap_at_the_boundary_and_cover_everything() {
    let (emu, outpost) = start().await;
    for i in 0..7 {
        session(&emu, &outpost, &format!("devin-{i}"), Script::default());
    }
    let mut cursor: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let mut path = format!("/devins?outpost={outpost}&phase=pending&first=3");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = get_json(&emu, &path).await;
        assert_eq!(status, StatusCode::OK);
        if cursor.is_none() {
            // As the service: the rows at or after the cursor.
            assert_eq!(page["total"], 7);
        }
        let ids: Vec<String> = page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["metadata"]["session_id"].as_str().unwrap().to_owned())
            .collect();
        pages.push(ids);
        cursor = page["cursor"].as_str().map(str::to_owned);
        if page["has_next_page"] != true {
            break;
        }
    }
    assert!(pages.len() >= 3);
    for pair in pages.windows(2) {
        assert_eq!(pair[0].last(), pair[1].first(), "boundary item repeats");
    }
    let seen: BTreeSet<String> = pages.into_iter().flatten().collect();
    assert_eq!(seen.len(), 7);

    // The final cursor is a watch position; `first` is bounded.
    assert!(cursor.is_some());
    for bad in ["0", "201", "x"] {
        let (status, body) =
            get_json(&emu, &format!("/devins?outpost={outpost}&first={bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "first={bad}");
        assert_eq!(body["error"], "invalid_request");
    }
    // `outpost` is a filter, not required (see tests/docs_protocol.rs).
    let (status, _) = get_json(&emu, "/devins").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn exactly_one_of_two_racing_acceptors_wins_the_claim() {
    let (emu, outpost) = start().await;
    for round in 0..5 {
        let id = session(
            &emu,
            &outpost,
            &format!("devin-race-{round}"),
            Script::default(),
        );
        let (a, b) = tokio::join!(claim(&emu, &id, "worker-a"), claim(&emu, &id, "worker-b"));
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
        let winner = if a.0 == StatusCode::OK { &a.1 } else { &b.1 };
        let loser = if a.0 == StatusCode::OK { &b.1 } else { &a.1 };
        assert_eq!(loser["error"], "conflict");
        assert!(
            winner["status"]["connect_token"]
                .as_str()
                .unwrap()
                .starts_with("ct_")
        );
        assert_eq!(winner["status"]["gateway_url"], emu.gateway_url());
        assert!(winner["status"]["claim_deadline"].is_number());
    }
}

#[tokio::test]
async fn renewal_release_and_unknown_ids() {
    let (emu, outpost) = start().await;
    let id = session(&emu, &outpost, "devin-1", Script::default());
    let (s1, first) = claim(&emu, &id, "a").await;
    let (s2, renewed) = claim(&emu, &id, "a").await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    assert_ne!(
        first["status"]["connect_token"],
        renewed["status"]["connect_token"]
    );
    let (status, body) =
        post_json(&emu, "/devins/devin-1/release", json!({"acceptor_id": "b"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"], "conflict");
    let (status, body) =
        post_json(&emu, "/devins/devin-1/release", json!({"acceptor_id": "a"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"]["phase"], "pending");
    assert!(body["status"].get("acceptor_id").is_none());

    emu.remove_entry(&id);
    let (status, _) = post_json(&emu, "/devins/devin-1/release", json!({"acceptor_id": "a"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = get_json(&emu, "/devins/devin-unknown").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = claim(&emu, "devin-unknown", "a").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let huge = "x".repeat(2 * 1024 * 1024);
    let (status, _) = post_json(&emu, "/devins/devin-1/claim", json!({"acceptor_id": huge})).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    let counts = emu.request_counts();
    assert_eq!(counts["POST /opbeta/outposts/devins/{id}/claim"], 4);
    assert_eq!(counts["POST /opbeta/outposts/devins/{id}/release"], 3);
    assert_eq!(counts["GET /opbeta/outposts/devins/{id}"], 1);
}

/// A lost answer: the claim is granted but its answer is a 502, so the
/// acceptor holds a claim it was never told about; its retry is a renewal.
#[tokio::test]
async fn a_lost_answer_changes_the_state_and_answers_502() {
    let (emu, outpost) = start().await;
    let id = session(&emu, &outpost, "devin-lost", Script::default());
    emu.set_faults(Faults {
        lost_answer_rate: 1.0,
        ..Faults::default()
    });
    let (status, body) = claim(&emu, &id, "a").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(body["error"], "bad_gateway");
    let view = emu.session(&id).unwrap();
    assert_eq!(view.events("claimed").count(), 1, "the claim was made");

    emu.set_faults(Faults::default());
    let (status, _) = claim(&emu, &id, "b").await;
    assert_eq!(status, StatusCode::CONFLICT, "and is held by a");
    let (status, _) = claim(&emu, &id, "a").await;
    assert_eq!(status, StatusCode::OK);
    let view = emu.session(&id).unwrap();
    assert_eq!(view.events("renewed").count(), 1, "the retry renews it");
}

#[tokio::test]
async fn claim_deadline_follows_the_configured_format() {
    let (emu, outpost) = start_with(EmulatorConfig {
        deadline_format: TimestampFormat::Iso8601,
        ..config()
    })
    .await;
    let id = session(&emu, &outpost, "devin-1", Script::default());
    let (_, body) = claim(&emu, &id, "a").await;
    let deadline = body["status"]["claim_deadline"].as_str().unwrap();
    assert!(deadline.ends_with('Z'), "{deadline}");
    let entry: fleet::QueueEntry = serde_json::from_value(body).unwrap();
    assert!(entry.status.claim_deadline.is_some());
}

/// Reads SSE frames until `done` says enough; returns the data payloads and
/// how many keepalive comments were seen.
async fn read_watch(
    resp: reqwest::Response,
    mut done: impl FnMut(&[Value], usize) -> bool,
) -> (Vec<Value>, usize) {
    let mut resp = resp;
    let mut buf = String::new();
    let mut events = Vec::new();
    let mut keepalives = 0;
    let read = async {
        while !done(&events, keepalives) {
            let Some(chunk) = resp.chunk().await.unwrap() else {
                break;
            };
            buf.push_str(std::str::from_utf8(&chunk).unwrap());
            while let Some(end) = buf.find("\n\n") {
                let frame: String = buf.drain(..end + 2).collect();
                for line in frame.lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        events.push(serde_json::from_str(data).unwrap());
                    } else if line.starts_with(": keepalive") {
                        keepalives += 1;
                    }
                }
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("watch stalled");
    (events, keepalives)
}

async fn watch(emu: &Emulator, outpost: &str, cursor: Option<&str>) -> reqwest::Response {
    let mut url = api(emu, &format!("/devins?outpost={outpost}&watch=true"));
    if let Some(c) = cursor {
        url.push_str(&format!("&cursor={c}"));
    }
    let resp = reqwest::Client::new()
        .get(url)
        .bearer_auth(emu.account_token())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    resp
}

#[tokio::test]
async fn watch_replays_after_the_list_cursor_then_follows_live() {
    let (emu, outpost) = start().await;
    session(&emu, &outpost, "devin-old", Script::default());
    let (_, page) = get_json(&emu, &format!("/devins?outpost={outpost}")).await;
    let cursor = page["cursor"].as_str().unwrap().to_owned();

    // Changes after the list, before the watch: replayed.
    claim(&emu, "devin-old", "a").await;
    session(&emu, &outpost, "devin-new", Script::default());
    let resp = watch(&emu, &outpost, Some(&cursor)).await;
    let live = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        emu.remove_entry("devin-new");
    };
    let ((events, keepalives), ()) =
        tokio::join!(read_watch(resp, |evs, ka| evs.len() >= 3 && ka >= 1), live);
    let summary: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["object"]["metadata"]["session_id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("MODIFIED".to_owned(), "devin-old".to_owned()),
            ("MODIFIED".to_owned(), "devin-new".to_owned()),
            ("DELETED".to_owned(), "devin-new".to_owned()),
        ]
    );
    assert_eq!(events[0]["object"]["status"]["phase"], "claimed");
    assert!(keepalives >= 1);

    // Resuming from an event's cursor replays only what came after it.
    let mid = events[1]["cursor"].as_str().unwrap().to_owned();
    let resp = watch(&emu, &outpost, Some(&mid)).await;
    let (again, _) = read_watch(resp, |evs, _| !evs.is_empty()).await;
    assert_eq!(again[0]["type"], "DELETED");

    // No cursor: from the beginning, each row once in its latest state
    // (keyset over the rows, not a log of every change).
    let resp = watch(&emu, &outpost, None).await;
    let (all, _) = read_watch(resp, |evs, _| evs.len() >= 2).await;
    assert_eq!(all[0]["object"]["metadata"]["session_id"], "devin-old");
    assert_eq!(all[0]["object"]["status"]["phase"], "claimed");
    assert_eq!(all[1]["type"], "DELETED");
}

#[tokio::test]
async fn watch_ends_after_max_stream_and_refuses_bad_cursors() {
    let (emu, outpost) = start_with(EmulatorConfig {
        max_stream: Duration::from_millis(200),
        ..config()
    })
    .await;
    let mut resp = watch(&emu, &outpost, None).await;
    let drained = async { while resp.chunk().await.unwrap().is_some() {} };
    tokio::time::timeout(PATIENCE, drained)
        .await
        .expect("stream ends");
    let (_, page) = get_json(&emu, &format!("/devins?outpost={outpost}")).await;
    let old = page["cursor"].as_str().unwrap().to_owned();
    emu.expire_cursors();
    for watching in ["&watch=true", ""] {
        let (status, _) = get_json(
            &emu,
            &format!("/devins?outpost={outpost}{watching}&cursor={old}"),
        )
        .await;
        assert_eq!(status, StatusCode::GONE, "{watching}");
    }
    let (status, _) = get_json(
        &emu,
        &format!("/devins?outpost={outpost}&watch=true&cursor=junk"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn pkce_connect_redirects_and_exchanges_a_code_once() {
    let (emu, _) = start().await;
    let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    emu.allow_callback("http://127.0.0.1:9/callback?x=1");
    let fields = [
        ("callback_url", "http://127.0.0.1:9/callback?x=1"),
        ("code_challenge", challenge),
        ("outpost_name", "connected"),
        ("state", "s1"),
    ];
    // The page shows a confirmation; the admin's Connect posts it back.
    let page = client
        .get(format!("{}/outposts/connect", emu.base_url()))
        .query(&fields)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let mut form = fields.to_vec();
    form.push(("action", "connect"));
    let resp = client
        .post(format!("{}/outposts/connect", emu.base_url()))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FOUND);
    let location = url::Url::parse(resp.headers()["location"].to_str().unwrap()).unwrap();
    assert_eq!(location.path(), "/callback");
    let params: std::collections::HashMap<_, _> = location.query_pairs().into_owned().collect();
    assert_eq!(params["x"], "1");
    assert_eq!(params["state"], "s1");
    let code = params["code"].clone();

    let token_url = format!("{}/outposts/connection-token", emu.base_url());
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("code_verifier", verifier),
    ];
    let resp = client.post(&token_url).form(&form).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["cache-control"], "no-store");
    let token: fleet::ConnectionToken = resp.json().await.unwrap();
    assert_eq!(token.api_base_url, emu.base_url());
    assert_eq!(token.outpost_name, "connected");

    // The new token works against the fleet API, on the new outpost.
    let list = client
        .get(api(&emu, &format!("/devins?outpost={}", token.outpost_id)))
        .bearer_auth(token.access_token.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);

    let reuse = client.post(&token_url).form(&form).send().await.unwrap();
    assert_eq!(reuse.status(), StatusCode::BAD_REQUEST);
    let body: Value = reuse.json().await.unwrap();
    assert_eq!(body["error"], "invalid_grant");

    let wrong_grant = client
        .post(&token_url)
        .form(&[
            ("grant_type", "password"),
            ("code", "x"),
            ("code_verifier", verifier),
        ])
        .send()
        .await
        .unwrap();
    let body: Value = wrong_grant.json().await.unwrap();
    assert_eq!(body["error"], "unsupported_grant_type");
    let missing = client
        .post(&token_url)
        .form(&[("grant_type", "authorization_code")])
        .send()
        .await
        .unwrap();
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"], "invalid_request");
}

#[tokio::test]
async fn static_distribution_serves_a_verifiable_binary_and_a_corrupt_one() {
    let path = std::env::temp_dir().join(format!("emulator-test-remote-{}", std::process::id()));
    std::fs::write(&path, b"#!/bin/sh\necho fake remote\n").unwrap();
    let (emu, _) = start_with(EmulatorConfig {
        remote_binary: Some(path.clone()),
        ..config()
    })
    .await;
    let client = reqwest::Client::new();
    let fetch = |name: String| {
        let client = client.clone();
        let url = format!("{}{name}", emu.static_base_url());
        async move {
            let resp = client.get(url).send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::OK);
            resp.bytes().await.unwrap()
        }
    };
    let latest = fetch("latest_linux_x64".into()).await;
    let sha = std::str::from_utf8(&latest).unwrap().trim().to_owned();
    assert_eq!(sha, emu.remote_sha());
    assert_eq!(sha.len(), 40);
    let binary = fetch(format!("devin-remote_{sha}_linux_x64")).await;
    let sum = fetch(format!("devin-remote_{sha}_linux_x64.sha256")).await;
    let sum = std::str::from_utf8(&sum).unwrap();
    assert_eq!(
        sum.split_whitespace().next().unwrap(),
        hex::encode(Sha256::digest(&binary))
    );
    assert_eq!(binary.as_ref(), std::fs::read(&path).unwrap());

    let bad = emu.add_corrupt_remote();
    let binary = fetch(format!("devin-remote_{bad}_linux_x64")).await;
    let sum = fetch(format!("devin-remote_{bad}_linux_x64.sha256")).await;
    assert_ne!(
        std::str::from_utf8(&sum)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap(),
        hex::encode(Sha256::digest(&binary))
    );
    let missing = client
        .get(format!(
            "{}devin-remote_{}_linux_x64",
            emu.static_base_url(),
            "0".repeat(40)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let _ = std::fs::remove_file(path);
}

#[tokio::test]
async fn without_a_binary_the_distribution_is_404_and_the_rest_works() {
    let (emu, outpost) = start().await;
    let resp = reqwest::get(format!("{}latest_linux_x64", emu.static_base_url()))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(emu.remote_sha(), "");
    let (status, _) = get_json(&emu, &format!("/devins?outpost={outpost}")).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn admin_api_creates_sessions_visible_in_the_fleet_api() {
    let (emu, _) = start().await;
    let client = reqwest::Client::new();
    let admin = |p: &str| format!("{}/_emulator{p}", emu.base_url());
    let outpost: Value = client
        .post(admin("/outposts"))
        .json(&json!({"name": "admin-made", "platform": "linux"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let outpost_id = outpost["metadata"]["outpost_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let created: Value = client
        .post(admin("/sessions"))
        .json(&json!({
            "outpost_id": outpost_id,
            "script": {"steps": [{"run": {"command": "echo hi"}}], "then": "sleep"},
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session_id = created["session_id"].as_str().unwrap().to_owned();
    assert!(session_id.starts_with("devin-"));

    let (_, page) = get_json(&emu, &format!("/devins?outpost={outpost_id}&phase=pending")).await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["session_id"], session_id.as_str());
    assert_eq!(items[0]["spec"]["kind"], "new");
    assert_eq!(items[0]["status"]["session_status"], "pending");
    let (_, outpost) = get_json(&emu, &format!("/outposts/{outpost_id}")).await;
    assert_eq!(outpost["status"]["queue_depth"], 1);

    let view: Value = client
        .get(admin(&format!("/sessions/{session_id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["transcript"][0]["kind"], "enqueued");

    let info: Value = client
        .get(admin("/info"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["gateway_url"], emu.gateway_url());
    let token: Value = client
        .post(admin("/tokens"))
        .json(&json!({"scopes": []}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let r = client
        .get(api(&emu, &format!("/devins?outpost={outpost_id}")))
        .bearer_auth(token["token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    let faults = client
        .put(admin("/faults"))
        .json(&json!({"error_rate": 1.0}))
        .send()
        .await
        .unwrap();
    assert_eq!(faults.status(), StatusCode::OK);
    let (a, _) = get_json(&emu, &format!("/devins?outpost={outpost_id}")).await;
    let (b, _) = get_json(&emu, &format!("/devins?outpost={outpost_id}")).await;
    let mut got = [a, b];
    got.sort();
    assert_eq!(
        got,
        [
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::SERVICE_UNAVAILABLE
        ]
    );
    let counts: Value = client
        .get(admin("/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counts["GET /opbeta/outposts/devins"], 4);
    emu.set_faults(Faults::default());
    let (ok, _) = get_json(&emu, &format!("/devins?outpost={outpost_id}")).await;
    assert_eq!(ok, StatusCode::OK);
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn dial(emu: &Emulator, token: &str, session_id: &str) -> Result<Socket, StatusCode> {
    let mut req = emu.gateway_url().into_client_request().unwrap();
    let h = req.headers_mut();
    h.insert("authorization", format!("Bearer {token}").parse().unwrap());
    h.insert("x-devin-session-id", session_id.parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(resp)) => Err(resp.status()),
        Err(other) => panic!("dial failed: {other}"),
    }
}

async fn recv(socket: &mut Socket) -> Value {
    let next = tokio::time::timeout(PATIENCE, socket.next())
        .await
        .expect("gateway silent");
    let msg = next.expect("socket open").expect("frame");
    serde_json::from_str(msg.into_text().unwrap().as_str()).unwrap()
}

async fn send(socket: &mut Socket, value: Value) {
    socket.send(Message::text(value.to_string())).await.unwrap();
}

async fn hello(socket: &mut Socket, session_id: &str) {
    send(
        socket,
        json!({"type": "hello", "session_id": session_id, "cwd": "/w", "pid": 1, "version": "test"}),
    )
    .await;
}

#[tokio::test]
async fn gateway_drives_the_script_once_and_the_status_follows_the_exit() {
    let (emu, outpost) = start().await;
    let script = Script {
        steps: vec![
            Step::Run {
                command: "echo hi".into(),
            },
            Step::Write {
                path: "notes.txt".into(),
                content: "x".into(),
            },
        ],
        then: Then::End,
    };
    let id = session(&emu, &outpost, "devin-gw", script);
    let (_, claimed) = claim(&emu, &id, "a").await;
    let token = claimed["status"]["connect_token"]
        .as_str()
        .unwrap()
        .to_owned();

    assert_eq!(
        dial(&emu, "ct_wrong", &id).await.unwrap_err(),
        StatusCode::UNAUTHORIZED
    );
    let other = session(&emu, &outpost, "devin-other", Script::default());
    assert_eq!(
        dial(&emu, &token, &other).await.unwrap_err(),
        StatusCode::FORBIDDEN
    );

    let mut first = dial(&emu, &token, &id).await.unwrap();
    hello(&mut first, &id).await;
    let exec = recv(&mut first).await;
    assert_eq!(exec["type"], "exec");
    assert_eq!(exec["command"], "echo hi");
    assert_eq!(
        emu.session(&id).unwrap().session_status,
        SessionStatus::Running
    );
    // A second remote for the same session is refused while one is live.
    assert_eq!(
        dial(&emu, &token, &id).await.unwrap_err(),
        StatusCode::CONFLICT
    );
    send(
        &mut first,
        json!({"type": "result", "id": exec["id"], "exit_code": 0, "output": "hi\n"}),
    )
    .await;
    // The remote dies before answering the write: the write is re-sent to
    // the next remote, the exec is not.
    let write = recv(&mut first).await;
    assert_eq!(write["type"], "write_file");
    drop(first);
    eventually("disconnect noticed", || {
        !emu.session(&id).unwrap().connected
    })
    .await;

    let mut second = dial(&emu, &token, &id).await.unwrap();
    hello(&mut second, &id).await;
    let again = recv(&mut second).await;
    assert_eq!(again["type"], "write_file");
    assert_eq!(again["path"], "notes.txt");
    send(
        &mut second,
        json!({"type": "result", "id": again["id"], "exit_code": 0, "output": ""}),
    )
    .await;
    assert_eq!(recv(&mut second).await["type"], "end");
    second.close(None).await.unwrap();

    eventually("terminated after the lag", || {
        emu.session(&id).unwrap().session_status == SessionStatus::Terminated
    })
    .await;
    let view = emu.session(&id).unwrap();
    assert_eq!(view.connections, 2);
    assert_eq!(view.events("duplicate_connection").count(), 1);
    let steps: Vec<_> = view.events("step").collect();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].detail["output"], "hi\n");
    assert_eq!(
        dial(&emu, &token, &id).await.unwrap_err(),
        StatusCode::FORBIDDEN,
        "terminated sessions refuse remotes"
    );

    // Released, the finished row lingers as pending, then is removed.
    let (status, row) = post_json(
        &emu,
        &format!("/devins/{id}/release"),
        json!({"acceptor_id": "a"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(row["status"]["session_status"], "terminated");
    eventually("lingering row removed", || {
        emu.session(&id).unwrap().entry.is_none()
    })
    .await;
}

#[tokio::test]
async fn wait_then_admin_suspend_and_resume_continue_the_session() {
    let (emu, outpost) = start().await;
    let id = session(
        &emu,
        &outpost,
        "devin-wait",
        Script {
            steps: vec![],
            then: Then::Wait,
        },
    );
    let (_, claimed) = claim(&emu, &id, "a").await;
    let token = claimed["status"]["connect_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut remote = dial(&emu, &token, &id).await.unwrap();
    hello(&mut remote, &id).await;
    eventually("running", || {
        emu.session(&id).unwrap().session_status == SessionStatus::Running
    })
    .await;
    assert!(
        emu.resume(&id, Script::default()).is_err(),
        "not suspended yet"
    );
    emu.suspend(&id).unwrap();
    assert_eq!(recv(&mut remote).await["type"], "sleep");
    remote.close(None).await.unwrap();
    eventually("suspended", || {
        emu.session(&id).unwrap().session_status == SessionStatus::Suspended
    })
    .await;
    post_json(
        &emu,
        &format!("/devins/{id}/release"),
        json!({"acceptor_id": "a"}),
    )
    .await;

    emu.resume(
        &id,
        Script {
            steps: vec![Step::Run {
                command: "true".into(),
            }],
            then: Then::Sleep,
        },
    )
    .unwrap();
    let (_, entry) = get_json(&emu, &format!("/devins/{id}")).await;
    assert_eq!(entry["spec"]["kind"], "resume");
    assert_eq!(entry["status"]["phase"], "pending");
    assert_eq!(entry["status"]["session_status"], "pending");
    let (status, claimed) = claim(&emu, &id, "b").await;
    assert_eq!(status, StatusCode::OK);
    let token = claimed["status"]["connect_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut remote = dial(&emu, &token, &id).await.unwrap();
    hello(&mut remote, &id).await;
    let exec = recv(&mut remote).await;
    assert_eq!(exec["command"], "true");
}

#[tokio::test]
async fn faults_flap_running_sessions_withhold_events_and_cut_streams() {
    let (emu, outpost) = start().await;
    let id = session(
        &emu,
        &outpost,
        "devin-flap",
        Script {
            steps: vec![],
            then: Then::Wait,
        },
    );
    let (_, claimed) = claim(&emu, &id, "a").await;
    let token = claimed["status"]["connect_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut remote = dial(&emu, &token, &id).await.unwrap();
    hello(&mut remote, &id).await;
    eventually("running", || {
        emu.session(&id).unwrap().session_status == SessionStatus::Running
    })
    .await;

    emu.set_faults(Faults {
        transient_suspended_rate: 1.0,
        withhold_events: true,
        ..Faults::default()
    });
    let (_, entry) = get_json(&emu, &format!("/devins/{id}")).await;
    assert_eq!(entry["status"]["session_status"], "suspended");
    let (_, page) = get_json(&emu, &format!("/devins?outpost={outpost}")).await;
    assert_eq!(page["items"][0]["status"]["session_status"], "suspended");
    assert_eq!(
        emu.session(&id).unwrap().session_status,
        SessionStatus::Running,
        "only reads flap"
    );

    // A withholding stream sends keepalives, never the events it has.
    let resp = watch(&emu, &outpost, None).await;
    let (events, keepalives) = read_watch(resp, |_, ka| ka >= 3).await;
    assert!(events.is_empty());
    assert!(keepalives >= 3);

    emu.set_faults(Faults {
        cut_watch_every_secs: Some(1),
        ..Faults::default()
    });
    let mut resp = watch(&emu, &outpost, None).await;
    let drained = async { while resp.chunk().await.unwrap().is_some() {} };
    tokio::time::timeout(PATIENCE, drained)
        .await
        .expect("cut stream ends");
}

#[tokio::test]
async fn claim_answers_can_omit_the_deadline_or_use_whole_seconds_and_short_lifetimes() {
    let (emu, outpost) = start().await;
    let id = session(&emu, &outpost, "devin-1", Script::default());
    let (_, ttl) = put_admin(&emu, "/_emulator/claim_ttl", json!({"ms": 6000})).await;
    assert_eq!(ttl, json!({"ms": 6000}));
    let mut faults = emu.faults();
    faults.whole_second_timestamps = true;
    emu.set_faults(faults.clone());
    let (_, body) = claim(&emu, &id, "a").await;
    let deadline = body["status"]["claim_deadline"]
        .as_i64()
        .expect("whole seconds");
    let updated = body["metadata"]["updated_at"]
        .as_i64()
        .expect("whole seconds");
    assert!((5..=6).contains(&(deadline - updated)), "{body}");
    let entry: fleet::QueueEntry = serde_json::from_value(body.clone()).unwrap();
    assert!(entry.status.claim_deadline.is_some(), "{body}");
    assert!(entry.metadata.updated_at.is_some(), "{body}");

    faults.claim_deadline_missing_rate = 1.0;
    emu.set_faults(faults);
    let (status, body) = claim(&emu, &id, "a").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["status"].get("claim_deadline").is_none(), "{body}");
    let (status, _) = put_admin(
        &emu,
        "/_emulator/faults",
        json!({"claim_deadline_missing_rate": 2.0}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

// Before the fix an expired claim counted as active until some queue read
// expired it.
#[tokio::test]
async fn an_expired_claim_is_not_an_active_claim() {
    let (emu, outpost) = start().await;
    emu.set_claim_ttl(Duration::from_millis(300));
    let id = session(&emu, &outpost, "devin-1", Script::default());
    let (status, _) = claim(&emu, &id, "a").await;
    assert_eq!(status, StatusCode::OK);
    let active = |body: &Value| body["status"]["active_claims"].as_u64();
    let mut last = None;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while last != Some(0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still active: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = active(&get_json(&emu, &format!("/outposts/{outpost}")).await.1);
    }
}

async fn put_admin(emu: &Emulator, path: &str, body: Value) -> (StatusCode, Value) {
    let resp = reqwest::Client::new()
        .put(format!("{}{path}", emu.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}
