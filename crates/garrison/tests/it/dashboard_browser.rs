//! The dashboard in a real browser: headless Chromium, driven over the
//! DevTools protocol, watches a session go from `running` to `terminated`
//! without a reload, and leaves a screenshot at `target/dashboard.png`;
//! with 1,000 sessions it shows them a page at a time, filters them and
//! still follows a live one (screenshot `target/dashboard-1000.png`).
//!
//! Skipped (with a message, passing) when Chromium is not installed;
//! `scripts/setup` installs it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use base64::Engine;
use emulator::Then;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const CHROMIUM: &str = "/usr/bin/chromium";

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
    format!("http://{addr}")
}

/// Headless Chromium with a fresh profile, killed on drop.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    port: u16,
}

impl Browser {
    async fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // The flags that keep Chromium off the network (this machine has
        // none beyond loopback) and quiet in a root, GPU-less container.
        let child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                "--window-size=1280,800",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        // Chromium writes the port it picked here once it listens.
        let port_file = profile.path().join("DevToolsActivePort");
        wait_until("chromium's DevToolsActivePort", None, || {
            std::fs::read_to_string(&port_file).is_ok_and(|t| t.lines().count() >= 2)
        })
        .await;
        let text = std::fs::read_to_string(&port_file).unwrap();
        let port = text.lines().next().unwrap().trim().parse().expect("port");
        Browser {
            child,
            _profile: profile,
            port,
        }
    }

    /// A DevTools session on the browser's first page.
    async fn page(&self) -> Page {
        let list_url = format!("http://127.0.0.1:{}/json/list", self.port);
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        let ws_url = loop {
            if let Ok(res) = reqwest::get(&list_url).await {
                let targets: Vec<Value> = res.json().await.unwrap_or_default();
                let page = targets
                    .iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str());
                if let Some(url) = page {
                    break url.to_owned();
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromium shows no page target"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let (ws, _) = tokio_tungstenite::connect_async(ws_url)
            .await
            .expect("devtools websocket");
        Page { ws, next_id: 0 }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One page's DevTools connection: commands and their answers (events
/// the page sends meanwhile are skipped).
struct Page {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
}

impl Page {
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(Message::text(request.to_string()))
            .await
            .expect("send");
        let answer = tokio::time::timeout(HANG_GUARD, async {
            while let Some(message) = self.ws.next().await {
                let Ok(Message::Text(text)) = message else {
                    continue;
                };
                let value: Value = serde_json::from_str(&text).expect("json");
                if value["id"] == id {
                    return value;
                }
            }
            panic!("the DevTools connection closed");
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to {method}"));
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    /// Evaluates `expression` in the page and returns its value.
    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        result["result"]["value"].clone()
    }

    /// Waits until the session's row shows `stage` (the page is never
    /// reloaded: the dashboard updates itself).
    async fn wait_for_stage(&mut self, session_id: &str, stage: &str) {
        let expression = format!(
            "(() => {{ const s = document.querySelector('#sessions tr[data-session-id=\"{session_id}\"] .stage'); \
             return s ? s.textContent : null; }})()"
        );
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        loop {
            let shown = self.eval(&expression).await;
            if shown == stage {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the row of {session_id} never showed {stage:?} (last: {shown})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until `expression` evaluates to `want`.
    async fn wait_for(&mut self, what: &str, expression: &str, want: Value) {
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        loop {
            let shown = self.eval(expression).await;
            if shown == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: never {want} (last: {shown})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The session ids of the table's rows, in order.
    async fn row_ids(&mut self) -> Vec<String> {
        let ids = self
            .eval("[...document.querySelectorAll('#sessions tbody tr')].map(r => r.dataset.sessionId)")
            .await;
        serde_json::from_value(ids).expect("row ids")
    }

    async fn screenshot(&mut self, path: &Path) {
        let result = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(result["data"].as_str().expect("data"))
            .expect("base64");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).expect("screenshot written");
    }
}

/// `target/` of this workspace (tests run with the package as cwd).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_a_session_to_its_end_without_a_reload() {
    if !Path::new(CHROMIUM).exists() {
        println!("skipped: {CHROMIUM} is not installed (scripts/setup installs it)");
        return;
    }
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &op,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    let admin = admin_url(&g).await;
    let id = session(
        &emu,
        &op,
        vec![run("echo working; sleep 0.2; echo still working")],
        Then::Wait,
    );

    let browser = Browser::start().await;
    let mut page = browser.page().await;
    page.call("Page.enable", json!({})).await;
    page.call("Page.navigate", json!({"url": format!("{admin}/")}))
        .await;
    page.wait_for_stage(&id, "running").await;

    emu.terminate(&id).expect("terminate");
    page.wait_for_stage(&id, "terminated").await;
    // Still the page loaded at the start: no navigation happened.
    assert_eq!(page.eval("performance.navigation.type").await, json!(0));

    let png = target_dir().join("dashboard.png");
    page.screenshot(&png).await;
    println!("screenshot: {}", png.display());
    drop(g);
}

/// Sessions already in the store when the test's Garrison starts.
const SEEDED: usize = 998;

/// Finished sessions as a long-running Garrison leaves them in its store:
/// written through the store's own API before `garrison serve` opens it, so
/// the admin listener lists them exactly as it lists sessions it ran.
/// Running 1,000 real sessions on this machine would measure the machine;
/// the listing, paging and rendering under test are the same either way.
fn seed_finished_sessions(state: &Path, outpost_id: &str) {
    use orchestrator::{Finish, SessionRecord, Stage, Store};
    let store = Store::open(&state.join("garrison.db")).expect("state store");
    let an_hour_ago = chrono::Utc::now().timestamp_millis() - 3_600_000;
    for i in 0..SEEDED {
        let finish = match i % 4 {
            0 => Finish::Released,
            1 => Finish::Failed,
            _ => Finish::Terminated,
        };
        let mut rec = SessionRecord::new(
            &sid(&format!("seeded-{i:04}")),
            outpost_id,
            fleet::SessionKind::New,
            "host",
            an_hour_ago + i as i64 * 1000,
        );
        rec.stage = Stage::Done(finish);
        store.put_session(&rec).expect("seeded session");
    }
}

const SET_SELECT: &str = "((id, value) => { const s = document.getElementById(id); s.value = value; \
     s.dispatchEvent(new Event('change')); })";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_pages_filters_and_follows_a_thousand_sessions() {
    if !Path::new(CHROMIUM).exists() {
        println!("skipped: {CHROMIUM} is not installed (scripts/setup installs it)");
        return;
    }
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    seed_finished_sessions(&state, &op);
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &op,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    let admin = admin_url(&g).await;
    let live: Vec<String> = (0..1000 - SEEDED)
        .map(|_| session(&emu, &op, vec![run("echo working")], Then::Wait))
        .collect();

    let browser = Browser::start().await;
    let mut page = browser.page().await;
    page.call("Page.enable", json!({})).await;
    page.call("Page.navigate", json!({"url": format!("{admin}/")}))
        .await;
    for id in &live {
        page.wait_for_stage(id, "running").await;
    }
    let total = "document.getElementById('sessions-total').textContent";
    page.wait_for("the total", total, json!("1,000 sessions · 2 active"))
        .await;

    // The first page: a bounded number of rows, the live sessions (the
    // newest claims) on top.
    let first = page.row_ids().await;
    assert_eq!(first.len(), 50, "{first:?}");
    assert!(live.iter().all(|id| first[..2].contains(id)), "{first:?}");
    let number = "document.getElementById('page-number').textContent";
    assert_eq!(page.eval(number).await, json!("Page 1 of 20"));

    // Another page shows other sessions.
    page.eval("document.getElementById('page-next').click()")
        .await;
    page.wait_for("the second page", number, json!("Page 2 of 20"))
        .await;
    page.wait_for(
        "the second page's first row",
        "document.querySelector('#sessions tbody tr').dataset.sessionId",
        json!(format!("seeded-{:04}", SEEDED - 49)),
    )
    .await;
    let second = page.row_ids().await;
    assert_eq!(second.len(), 50);
    assert!(second.iter().all(|id| !first.contains(id)), "{second:?}");
    let range = "document.getElementById('page-range').textContent";
    assert_eq!(page.eval(range).await, json!("51–100 of 1,000"));

    // A filter narrows, from whatever page, back to the first.
    page.eval(&format!("{SET_SELECT}('filter-stage', 'running')"))
        .await;
    page.wait_for("the running filter", range, json!("1–2 of 2 matching"))
        .await;
    let mut running = page.row_ids().await;
    running.sort();
    let mut want = live.clone();
    want.sort();
    assert_eq!(running, want);
    page.eval(&format!("{SET_SELECT}('filter-stage', '')"))
        .await;
    page.eval(
        "(() => { const q = document.getElementById('filter-q'); q.value = 'seeded-09'; \
         q.dispatchEvent(new Event('input')); })()",
    )
    .await;
    page.wait_for("the search", range, json!("1–50 of 98 matching"))
        .await;
    assert!(
        page.row_ids()
            .await
            .iter()
            .all(|id| id.starts_with("seeded-09"))
    );
    page.eval(
        "(() => { const q = document.getElementById('filter-q'); q.value = ''; \
         q.dispatchEvent(new Event('input')); })()",
    )
    .await;
    page.wait_for("the whole list again", range, json!("1–50 of 1,000"))
        .await;

    // A session ending shows without a reload.
    emu.terminate(&live[0]).expect("terminate");
    page.wait_for_stage(&live[0], "terminated").await;
    page.wait_for("the total", total, json!("1,000 sessions · 1 active"))
        .await;
    assert_eq!(page.eval("performance.navigation.type").await, json!(0));

    let png = target_dir().join("dashboard-1000.png");
    page.screenshot(&png).await;
    println!("screenshot: {}", png.display());

    // A session far from the shown page opens, and the way back finds the
    // table as it was left.
    page.eval("document.getElementById('page-next').click()")
        .await;
    page.wait_for("the second page", number, json!("Page 2 of 20"))
        .await;
    page.eval("location.hash = '#/sessions/seeded-0100'").await;
    page.wait_for(
        "the session's page",
        "document.getElementById('detail-stage').textContent",
        json!("released"),
    )
    .await;
    page.eval("document.querySelector('a.back').click()").await;
    page.wait_for("the table again", number, json!("Page 2 of 20"))
        .await;
    assert_eq!(page.row_ids().await, second);

    drop(g);
}
