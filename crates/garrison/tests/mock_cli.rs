//! `garrison mock tensorlake` serves the mock Tensorlake API as a process.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[tokio::test]
async fn the_mock_tensorlake_command_serves_the_api_with_the_key_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["mock", "tensorlake", "--root"])
        .arg(dir.path())
        .env_clear()
        .env("TENSORLAKE_API_KEY", "tl_cli_mock_key_123")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    let url = url
        .strip_prefix("TENSORLAKE_API_URL=")
        .expect(&url)
        .to_owned();
    let root = lines.next().unwrap().unwrap();
    assert!(root.starts_with("TENSORLAKE_SANDBOX_ROOT="), "{root}");

    let http = reqwest::Client::new();
    let listed = http
        .get(format!("{url}/sandboxes"))
        .bearer_auth("tl_cli_mock_key_123")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(
        listed.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!({ "sandboxes": [] })
    );
    let refused = http.get(format!("{url}/sandboxes")).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_mock_refuses_to_listen_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["mock", "tensorlake", "--listen", "0.0.0.0:0", "--root"])
        .arg(dir.path())
        .env_clear()
        .env("TENSORLAKE_API_KEY", "tl_cli_mock_key_123")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loopback"), "{stderr}");
}
