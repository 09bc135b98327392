//! The admin listener of `garrison serve` end to end: the real binary
//! against the emulator, every request to 127.0.0.1 on the port it logged.

use std::time::Duration;

use crate::common::*;
use emulator::Then;
use fleet::SessionStatus;
use futures::StreamExt;
use serde_json::Value;

/// The address from the `admin listening on http://...` log line.
async fn admin_url(g: &Garrison) -> String {
    const MARK: &str = "admin listening on http://";
    wait_until("the admin listener", Some(g), || g.log().contains(MARK)).await;
    let log = g.log();
    let rest = &log[log.find(MARK).unwrap() + MARK.len()..];
    let addr: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    format!("http://{addr}")
}

async fn get(http: &reqwest::Client, url: &str) -> (u16, String) {
    let res = http.get(url).send().await.expect("request");
    let status = res.status().as_u16();
    (status, res.text().await.expect("body"))
}

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let (status, body) = get(http, url).await;
    assert_eq!(status, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"))
}

/// The stage `/api/sessions` shows for `id`.
async fn stage_of(http: &reqwest::Client, base: &str, id: &str) -> Option<String> {
    let list = get_json(http, &format!("{base}/api/sessions")).await;
    list.as_array()?
        .iter()
        .find(|s| s["session_id"] == id)
        .and_then(|s| s["stage"].as_str().map(str::to_owned))
}

/// Polls an async condition with the hang guard.
async fn wait_async<F, Fut>(what: &str, g: &Garrison, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while !check().await {
        if tokio::time::Instant::now() > deadline {
            panic!(
                "timed out waiting for {what}\n--- garrison log ---\n{}",
                g.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the first sample line of `metric` with `labels` (exact
/// label text, e.g. `{stage="running"}`, or empty).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().expect("numeric sample"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_health_metrics_api_stream_and_dashboard() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    let base = admin_url(&g).await;
    let http = reqwest::Client::builder()
        .timeout(HANG_GUARD)
        .build()
        .unwrap();

    // Alive at once; ready once the queue has been listed.
    assert_eq!(get(&http, &format!("{base}/healthz")).await.0, 200);
    wait_async("/readyz 200", &g, || async {
        get(&http, &format!("{base}/readyz")).await.0 == 200
    })
    .await;

    // A session that runs to its end.
    let done = session(&emu, &outpost, vec![run("echo admin-e2e")], Then::End);
    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &done, SessionStatus::Terminated) && released(&emu, &done)
    })
    .await;
    wait_async("the session shown as terminated", &g, || async {
        stage_of(&http, &base, &done).await.as_deref() == Some("terminated")
    })
    .await;

    let list = get_json(&http, &format!("{base}/api/sessions")).await;
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == done.as_str())
        .expect("listed");
    assert_eq!(row["outpost_id"], outpost.as_str());
    assert_eq!(row["backend"], "host");
    assert!(
        row["cpus"].as_f64().is_some(),
        "sizing from the outpost config: {row}"
    );
    assert!(row["memory_mb"].as_u64().is_some());

    let id_path = percent_encode(&done);
    let detail = get_json(&http, &format!("{base}/api/sessions/{id_path}")).await;
    let events = detail["events"].as_array().expect("events");
    assert!(events.iter().any(|e| e["kind"] == "claimed"), "{detail}");
    assert!(detail["log_bytes"].as_u64().unwrap() > 0, "{detail}");
    assert_eq!(detail["stage"], "terminated");
    let first = events[0]["id"].as_i64().unwrap();
    let after = get_json(
        &http,
        &format!("{base}/api/sessions/{id_path}/events?after={first}"),
    )
    .await;
    assert_eq!(after.as_array().unwrap().len(), events.len() - 1);

    let log = get_json(
        &http,
        &format!("{base}/api/sessions/{id_path}/log?offset=0"),
    )
    .await;
    let text = log["text"].as_str().unwrap();
    assert!(text.contains("devin-remote-sim: connected to"), "{log}");
    assert_eq!(log["next_offset"].as_u64(), detail["log_bytes"].as_u64());
    assert_eq!(
        get(&http, &format!("{base}/api/sessions/no-such-session"))
            .await
            .0,
        404
    );

    // Terminate: only with the admin token (made 0600 in the state
    // directory), then 404 unknown, 409 done, and only with a JSON body.
    let token_file = state.join("admin-token");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&token_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.trim();
    for wrong in [None, Some("not-the-token")] {
        let req = http
            .post(format!("{base}/api/sessions/{id_path}/terminate"))
            .header("content-type", "application/json")
            .body("{}");
        let req = match wrong {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let res = req.send().await.unwrap();
        assert_eq!(res.status().as_u16(), 401, "token {wrong:?}");
        assert!(res.text().await.unwrap().contains("admin token"));
    }
    let post = |path: String, json: bool| {
        let req = http.post(format!("{base}{path}")).bearer_auth(token);
        let req = if json {
            req.header("content-type", "application/json").body("{}")
        } else {
            req
        };
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(post("/api/sessions/nope/terminate".into(), true).await, 404);
    assert_eq!(
        post(format!("/api/sessions/{id_path}/terminate"), true).await,
        409
    );
    assert_eq!(
        post(format!("/api/sessions/{id_path}/terminate"), false).await,
        415
    );

    // A session that stays running: its stream carries the remote's output
    // live, then its end.
    let live = session(&emu, &outpost, vec![run("echo waiting")], Then::Wait);
    wait_async("the live session running", &g, || async {
        stage_of(&http, &base, &live).await.as_deref() == Some("running")
    })
    .await;
    let res = http
        .get(format!(
            "{base}/api/sessions/{}/stream",
            percent_encode(&live)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = res.bytes_stream();
    let mut seen = String::new();
    // The stream interleaves log, stage and event messages in no fixed
    // order: read until each kind has arrived.
    let complete = |seen: &str| {
        seen.contains("event: log")
            && seen.contains("connected to")
            && seen.contains("event: stage\ndata: running")
            && seen.contains("event: event\n")
    };
    let read = async {
        while !complete(&seen) {
            let chunk = body.next().await.expect("stream open").expect("chunk");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(HANG_GUARD, read)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the stream lacks live log, stage or events:\n{seen}\n{}",
                g.log()
            )
        });

    emu.terminate(&live).unwrap();
    // The stream ends by itself once the session is done.
    tokio::time::timeout(HANG_GUARD, async {
        while let Some(chunk) = body.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the stream did not end:\n{seen}\n{}", g.log()));
    assert!(seen.contains("event: stage\ndata: terminated"), "{seen}");

    // Metrics.
    let (status, metrics) = get(&http, &format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        sample(&metrics, "garrison_claims_won_total").unwrap() >= 2.0,
        "{metrics}"
    );
    assert!(
        sample(&metrics, "garrison_sessions{stage=\"terminated\"}").unwrap() >= 2.0,
        "{metrics}"
    );
    assert!(sample(&metrics, "garrison_remotes_started_total").unwrap() >= 2.0);
    assert!(sample(&metrics, "garrison_queue_to_running_seconds_count").unwrap() >= 2.0);
    assert!(metrics.contains("# TYPE garrison_sandbox_start_seconds histogram"));
    assert!(
        metrics
            .contains("garrison_fleet_requests_total{route=\"POST /devins/{session_id}/claim\"}")
    );
    assert!(metrics.contains(&format!(
        "garrison_watch_reconnects_total{{outpost=\"{outpost}\"}}"
    )));
    assert_eq!(sample(&metrics, "garrison_ready"), Some(1.0));

    // Status.
    let status = get_json(&http, &format!("{base}/api/status")).await;
    assert!(!status["acceptor_id"].as_str().unwrap().is_empty());
    assert_eq!(status["ready"], true);
    assert_eq!(status["outposts"][0]["outpost_id"], outpost.as_str());
    assert_eq!(status["outposts"][0]["backend"], "host");
    assert!(
        status["outposts"][0]["queue_synced_at_ms"]
            .as_i64()
            .unwrap()
            > 0
    );
    assert_eq!(status["counts"]["terminated"], 2);

    // The dashboard and its assets.
    let (status, html) = get(&http, &format!("{base}/")).await;
    assert_eq!(status, 200);
    assert!(html.contains("id=\"sessions\""), "{html}");
    let (status, js) = get(&http, &format!("{base}/assets/app.js")).await;
    assert_eq!(status, 200);
    assert!(
        !js.contains("innerHTML"),
        "the dashboard writes server strings as text only"
    );
    assert_eq!(get(&http, &format!("{base}/assets/style.css")).await.0, 200);
    assert_eq!(
        get(&http, &format!("{base}/sessions/{id_path}")).await.0,
        200
    );

    // A request for another host name (DNS rebinding) is refused.
    let res = http
        .get(format!("{base}/api/status"))
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 421);
}

fn percent_encode(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
