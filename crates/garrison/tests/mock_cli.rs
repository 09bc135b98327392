//! `garrison mock tensorlake` serves the mock Tensorlake API as a process,
//! and `--help` says what the mock is for.

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
    // Where the official SDK and Garrison send lifecycle calls.
    let sandbox_api = lines.next().unwrap().unwrap();
    assert_eq!(sandbox_api, format!("TENSORLAKE_SANDBOX_API_URL={url}"));

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
        serde_json::json!({ "sandboxes": [], "cursor": null })
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

#[test]
fn the_mock_is_listed_and_its_help_says_what_it_is_for() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_garrison"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    assert!(
        top.lines()
            .any(|l| l.trim_start().starts_with("mock ") && l.contains("without an account")),
        "{top}"
    );
    let mock = help(&["mock", "--help"]);
    for needle in ["not the real service", "loopback", "tensorlake"] {
        assert!(
            mock.contains(needle),
            "mock --help lacks {needle:?}:\n{mock}"
        );
    }
    let tensorlake = help(&["mock", "tensorlake", "--help"]);
    for needle in [
        "TENSORLAKE_API_KEY",
        "TENSORLAKE_API_URL=http://127.0.0.1:PORT",
        "TENSORLAKE_SANDBOX_ROOT=",
        "TENSORLAKE_SANDBOX_API_URL=",
    ] {
        assert!(
            tensorlake.contains(needle),
            "mock tensorlake --help lacks {needle:?}:\n{tensorlake}"
        );
    }
}
