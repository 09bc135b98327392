//! `garrison deploy tensorlake` against the mock Tensorlake: the real
//! binary is copied into a mock sandbox and serves the emulator's sessions
//! from there.

use std::process::Output;
use std::time::Duration;

use crate::common::*;
use emulator::{Emulator, Then};
use fleet::SessionStatus;

const NAME: &str = "garrison-orchestrator";

/// The deploying host: its environment and the serve options it forwards.
struct Host {
    emu: Emulator,
    world: std::sync::Arc<TensorlakeWorld>,
    env: Vec<(String, String)>,
    serve_args: Vec<String>,
    outpost: String,
    _dir: tempfile::TempDir,
}

impl Host {
    async fn new() -> Host {
        let emu = emulator().await;
        let outpost = outpost(&emu);
        let dir = tempfile::tempdir().unwrap();
        let world = TensorlakeWorld::for_state_dir(&dir.path().join("state"));
        let mut env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), dir.path().display().to_string()),
            (
                "GARRISON_CONFIG".to_owned(),
                dir.path().join("no-config").display().to_string(),
            ),
            ("DEVIN_OUTPOSTS_TOKEN".to_owned(), emu.account_token()),
            ("RUST_LOG".to_owned(), "info".to_owned()),
        ];
        env.extend(world.env());
        let serve_args = vec![
            "--outpost".to_owned(),
            outpost.clone(),
            "--api-url".to_owned(),
            emu.base_url(),
            "--static-base-url".to_owned(),
            emu.static_base_url(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
        ];
        Host {
            emu,
            world,
            env,
            serve_args,
            outpost,
            _dir: dir,
        }
    }

    fn mock(&self) -> &tensorlake_mock::MockTensorlake {
        self.world.mock()
    }

    /// `garrison deploy tensorlake <args> -- <serve args>`.
    async fn deploy(&self, args: &[&str]) -> Output {
        let mut command = tokio::process::Command::new(garrison_bin());
        command
            .args(["deploy", "tensorlake"])
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true);
        if args.is_empty() {
            command.arg("--").args(&self.serve_args);
        }
        let output = tokio::time::timeout(HANG_GUARD, command.output())
            .await
            .expect("deploy finishes")
            .expect("deploy runs");
        let text = text(&output);
        for secret in [self.emu.account_token(), TENSORLAKE_KEY.to_owned()] {
            assert!(
                !text.contains(&secret),
                "a secret in deploy's output:\n{text}"
            );
        }
        output
    }

    async fn api(&self, method: reqwest::Method, path: &str) -> serde_json::Value {
        self.api_for(method, path, None, None).await
    }

    async fn api_for(
        &self,
        method: reqwest::Method,
        path: &str,
        sandbox: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{path}", self.mock().url()))
            .bearer_auth(TENSORLAKE_KEY);
        if let Some(id) = sandbox {
            request = request.header("X-Tensorlake-Sandbox-Id", id);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.unwrap().json().await.unwrap()
    }

    /// The sandboxes named `NAME`: `(id, status)`.
    async fn deployments(&self) -> Vec<(String, String)> {
        let list = self.api(reqwest::Method::GET, "/sandboxes").await;
        list["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"] == NAME)
            .map(|s| {
                (
                    s["sandbox_id"].as_str().unwrap().to_owned(),
                    s["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The serve processes of the sandbox: `(name, pid, status)`.
    async fn serves(&self, id: &str) -> Vec<(String, i64, String)> {
        let list = self
            .api_for(reqwest::Method::GET, "/api/v1/processes", Some(id), None)
            .await;
        list["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                let name = p["managed"]["name"].as_str()?;
                name.starts_with("garrison-serve-").then(|| {
                    (
                        name.to_owned(),
                        p["pid"].as_i64().unwrap(),
                        p["status"].as_str().unwrap().to_owned(),
                    )
                })
            })
            .collect()
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_creates_converges_restarts_resumes_and_terminates() {
    let host = Host::new().await;

    // First run: creates the sandbox and starts serve in it.
    let first = host.deploy(&[]).await;
    assert!(first.status.success(), "{}", text(&first));
    let out = stdout(&first);
    assert!(
        out.contains("created sandbox garrison-orchestrator"),
        "{out}"
    );
    assert!(
        out.contains("started garrison serve (garrison-serve-1"),
        "{out}"
    );
    let deployments = host.deployments().await;
    assert_eq!(deployments.len(), 1, "{deployments:?}");
    let (id, status) = deployments[0].clone();
    assert_eq!(status, "running");

    // The credentials are in the process's environment, not its argv, and
    // not in what the sandbox was created with.
    let starts = host.mock().process_starts();
    let serve = starts
        .iter()
        .find(|s| s["name"] == "garrison-serve-1")
        .expect("the serve start was recorded");
    assert_eq!(
        serve["env"]["DEVIN_OUTPOSTS_TOKEN"],
        host.emu.account_token()
    );
    assert_eq!(serve["env"]["TENSORLAKE_API_KEY"], TENSORLAKE_KEY);
    let argv = format!("{} {}", serve["command"], serve["args"]);
    assert!(
        argv.contains("serve") && argv.contains("--backend"),
        "{argv}"
    );
    for secret in [host.emu.account_token(), TENSORLAKE_KEY.to_owned()] {
        assert!(!argv.contains(&secret), "a secret in argv: {argv}");
        let created = host.mock().last_create().unwrap().to_string();
        assert!(
            !created.contains(&secret),
            "a secret in the create: {created}"
        );
        let info = host
            .api(reqwest::Method::GET, &format!("/sandboxes/{id}"))
            .await
            .to_string();
        assert!(!info.contains(&secret), "a secret in the sandbox: {info}");
    }

    // The deployed Garrison serves sessions.
    let session = session(&host.emu, &host.outpost, vec![run("echo hi")], Then::End);
    wait_until("the deployed serve ran the session", None, || {
        status_is(&host.emu, &session, SessionStatus::Terminated) && released(&host.emu, &session)
    })
    .await;

    // Second run: the same sandbox and process, nothing started.
    let second = host.deploy(&[]).await;
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        stdout(&second).contains("nothing to do"),
        "{}",
        text(&second)
    );
    assert_eq!(
        host.deployments().await,
        vec![(id.clone(), "running".into())]
    );
    let serves = host.serves(&id).await;
    assert_eq!(serves.len(), 1, "{serves:?}");
    assert_eq!(serves[0].2, "running");
    let first_pid = serves[0].1;

    // --status and --logs.
    let status = host.deploy(&["--status"]).await;
    assert!(status.status.success(), "{}", text(&status));
    let out = stdout(&status);
    assert!(out.contains(&id) && out.contains("running"), "{out}");
    assert!(
        out.contains("garrison-serve-1") && out.contains("uptime"),
        "{out}"
    );
    let logs = host.deploy(&["--logs"]).await;
    assert!(logs.status.success(), "{}", text(&logs));
    assert!(
        stdout(&logs).contains(&session),
        "the serve's output names the session it ran:\n{}",
        text(&logs)
    );

    // Killed: the next run starts a new one in the same sandbox.
    host.api_for(
        reqwest::Method::POST,
        "/api/v1/processes/garrison-serve-1/signal",
        Some(&id),
        Some(serde_json::json!({ "signal": 9 })),
    )
    .await;
    let mut serves = Vec::new();
    for _ in 0..600 {
        serves = host.serves(&id).await;
        if serves.iter().all(|s| s.2 != "running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(serves.iter().all(|s| s.2 != "running"), "{serves:?}");
    let down = host.deploy(&["--status"]).await;
    assert_eq!(down.status.code(), Some(3), "{}", text(&down));
    let third = host.deploy(&[]).await;
    assert!(third.status.success(), "{}", text(&third));
    assert!(
        stdout(&third).contains("started garrison serve (garrison-serve-2"),
        "{}",
        text(&third)
    );
    assert_eq!(
        host.deployments().await,
        vec![(id.clone(), "running".into())]
    );
    let restarted = host.serves(&id).await;
    let second_pid = restarted
        .iter()
        .find(|s| s.0 == "garrison-serve-2" && s.2 == "running")
        .expect("garrison-serve-2 runs")
        .1;
    assert_ne!(second_pid, first_pid);

    // Suspended (as Tensorlake does for idleness): --status does not wake
    // it; the next run resumes it and keeps the same process.
    assert!(host.mock().suspend_for_idleness(&id));
    wait_until("suspended", None, || {
        host.mock().status(&id).as_deref() == Some("suspended")
    })
    .await;
    let asleep = host.deploy(&["--status"]).await;
    assert_eq!(asleep.status.code(), Some(3), "{}", text(&asleep));
    assert!(stdout(&asleep).contains("suspended"), "{}", text(&asleep));
    assert_eq!(host.mock().status(&id).as_deref(), Some("suspended"));
    assert_eq!(host.mock().requests(&format!("/sandboxes/{id}/resume")), 0);
    let fourth = host.deploy(&[]).await;
    assert!(fourth.status.success(), "{}", text(&fourth));
    let out = stdout(&fourth);
    assert!(
        out.contains("resuming sandbox") && out.contains("nothing to do"),
        "{out}"
    );
    assert_eq!(host.mock().status(&id).as_deref(), Some("running"));
    let after = host.serves(&id).await;
    assert!(
        after
            .iter()
            .any(|s| s.0 == "garrison-serve-2" && s.1 == second_pid && s.2 == "running"),
        "{after:?}"
    );

    // --terminate deletes it.
    let gone = host.deploy(&["--terminate"]).await;
    assert!(gone.status.success(), "{}", text(&gone));
    assert_eq!(host.mock().status(&id), None);
    assert!(host.deployments().await.is_empty());
    let none = host.deploy(&["--status"]).await;
    assert_eq!(none.status.code(), Some(3), "{}", text(&none));
}

#[tokio::test]
async fn deploy_help_teaches_the_modes_credentials_and_keep_alive() {
    let output = std::process::Command::new(garrison_bin())
        .args(["deploy", "tensorlake", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "--status",
        "--logs",
        "--terminate",
        "-f, --follow",
        "TENSORLAKE_API_KEY",
        "DEVIN_OUTPOSTS_TOKEN",
        "never on a command line",
        "*/5 * * * *",
        "garrison-deploy.timer",
        "-- --max-concurrent",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

#[tokio::test]
async fn deploy_refuses_forwarded_flags_it_sets_and_a_bad_name() {
    for args in [
        &["deploy", "tensorlake", "--", "--backend", "local"][..],
        &["deploy", "tensorlake", "--", "--token", "x"][..],
        &["deploy", "tensorlake", "--name", "Not_A_Name"][..],
    ] {
        let output = std::process::Command::new(garrison_bin())
            .args(args)
            .env_clear()
            .env("TENSORLAKE_API_KEY", "tl_unused")
            .env("DEVIN_OUTPOSTS_TOKEN", "cog_unused")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(
            err.contains("--backend") || err.contains("--token") || err.contains("--name"),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("cog_unused") && !err.contains("tl_unused"),
            "{err}"
        );
    }
}

/// Collects a child's stdout as it comes.
fn collect(stdout: tokio::process::ChildStdout) -> std::sync::Arc<std::sync::Mutex<String>> {
    use tokio::io::AsyncReadExt;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = seen.clone();
    tokio::spawn(async move {
        let mut stdout = stdout;
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf).await {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_waits_across_a_suspend_without_waking_the_sandbox() {
    let host = Host::new().await;
    let first = host.deploy(&[]).await;
    assert!(first.status.success(), "{}", text(&first));
    let (id, _) = host.deployments().await[0].clone();

    let mut follower = tokio::process::Command::new(garrison_bin())
        .args(["deploy", "tensorlake", "--logs", "-f"])
        .env_clear()
        .envs(host.env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let seen = collect(follower.stdout.take().unwrap());
    let before = session(&host.emu, &host.outpost, vec![run("echo one")], Then::End);
    wait_until("the follower shows the first session", None, || {
        seen.lock().unwrap().contains(&before)
    })
    .await;

    assert!(host.mock().suspend_for_idleness(&id));
    wait_until("suspended", None, || {
        host.mock().status(&id).as_deref() == Some("suspended")
    })
    .await;
    let after = session(&host.emu, &host.outpost, vec![run("echo two")], Then::End);
    // Asleep: the follower waits, and wakes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(host.mock().status(&id).as_deref(), Some("suspended"));
    assert_eq!(host.mock().requests(&format!("/sandboxes/{id}/resume")), 0);
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follower gave up"
    );

    // The keep-alive run resumes it; the follower goes on.
    let again = host.deploy(&[]).await;
    assert!(again.status.success(), "{}", text(&again));
    wait_until(
        "the follower shows the session claimed after the resume",
        None,
        || seen.lock().unwrap().contains(&after),
    )
    .await;
    let text = seen.lock().unwrap().clone();
    assert_eq!(
        text.matches("garrison serving").count(),
        1,
        "printed once, not again on a reconnect:\n{text}"
    );
    let _ = follower.kill().await;
}
