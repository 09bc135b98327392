//! `garrison mock tensorlake` and `garrison mock modal` serve the mock APIs
//! as processes, and `--help` says what the mocks are for.

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

#[tokio::test]
async fn the_mock_modal_command_serves_the_api_with_the_token_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["mock", "modal", "--root"])
        .arg(dir.path())
        .env_clear()
        .env("MODAL_TOKEN_ID", "ak-cli-mock")
        .env("MODAL_TOKEN_SECRET", "as-cli-mock")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .strip_prefix("MODAL_SERVER_URL=http://127.0.0.1:")
        .map(|port| format!("http://127.0.0.1:{port}"))
        .expect(&first);

    let client = |id: &str, secret: &str| {
        modal::Client::new(&modal::ClientConfig {
            api_url: url.clone(),
            credentials: modal::Credentials {
                token_id: common::Secret::new(id),
                token_secret: common::Secret::new(secret),
            },
            retry: modal::RetryPolicy {
                attempts: 1,
                ..Default::default()
            },
        })
        .unwrap()
    };
    let lookup = modal::wire::AppGetOrCreateRequest {
        app_name: "garrison-cli".into(),
        environment_name: String::new(),
        object_creation_type: modal::wire::ObjectCreationType::CreateIfMissing as i32,
    };
    let app = client("ak-cli-mock", "as-cli-mock")
        .rpc()
        .app_get_or_create(lookup.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(app.app_id.starts_with("ap-"), "{app:?}");
    let refused = client("ak-cli-mock", "as-wrong")
        .rpc()
        .app_get_or_create(lookup)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_mock_modal_command_requires_the_token_in_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["mock", "modal", "--root"])
        .arg(dir.path())
        .env_clear()
        .env("MODAL_TOKEN_ID", "ak-cli-mock")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("MODAL_TOKEN_SECRET"), "{stderr}");
}

#[test]
fn the_mock_modal_command_refuses_to_listen_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_garrison"))
        .args(["mock", "modal", "--listen", "0.0.0.0:0", "--root"])
        .arg(dir.path())
        .env_clear()
        .env("MODAL_TOKEN_ID", "ak-cli-mock")
        .env("MODAL_TOKEN_SECRET", "as-cli-mock")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loopback"), "{stderr}");
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
    for needle in ["not the real service", "loopback", "tensorlake", "modal"] {
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
    let modal = help(&["mock", "modal", "--help"]);
    for needle in [
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "The first line is MODAL_SERVER_URL=",
        "command router",
    ] {
        assert!(
            modal.contains(needle),
            "mock modal --help lacks {needle:?}:\n{modal}"
        );
    }
}
