//! `garrison emulate` as a program: it prints where it listens and a token,
//! and a session created through its admin API is visible in the fleet API.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn an_admin_session_is_visible_in_the_fleet_api() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["emulate", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _guard = Killed(child);
    let mut printed = std::collections::BTreeMap::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some((k, v)) = line.split_once('=') {
            printed.insert(k.to_owned(), v.to_owned());
        }
        if printed.contains_key("static_base_url") {
            break;
        }
    }
    let base = &printed["base_url"];
    let token = &printed["token"];
    let outpost = &printed["outpost_id"];
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");

    let http = reqwest::Client::new();
    let created: serde_json::Value = http
        .post(format!("{base}/_emulator/sessions"))
        .json(&serde_json::json!({ "outpost_id": outpost, "session_id": "devin-cli-check" }))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["session_id"], "devin-cli-check");

    let listed: serde_json::Value = http
        .get(format!("{base}/opbeta/outposts/devins"))
        .query(&[("outpost", outpost.as_str())])
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["metadata"]["session_id"].as_str())
        .collect();
    assert_eq!(ids, ["devin-cli-check"]);

    // Without the token the fleet API refuses.
    let status = http
        .get(format!("{base}/opbeta/outposts/devins?outpost={outpost}"))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 401);
}
