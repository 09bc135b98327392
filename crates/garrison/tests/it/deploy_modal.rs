//! `garrison deploy modal` against the mock Modal API: the real binary is
//! copied into a mock sandbox, runs there as its entry point with its
//! credentials from a Modal Secret, and serves the emulator's sessions in
//! sandboxes of their own that never see those credentials.

use std::process::Output;

use crate::common;
use crate::common::*;
use emulator::{Emulator, Then};
use fleet::SessionStatus;

const NAME: &str = "garrison-orchestrator";

/// The deploying host: its environment and the serve options it forwards.
struct Host {
    emu: Emulator,
    mock: std::sync::Arc<modal_mock::MockModal>,
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
        let mock = start_modal_mock(&dir.path().join("state"));
        let mut env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), dir.path().display().to_string()),
            (
                "GARRISON_CONFIG".to_owned(),
                dir.path().join("no-config").display().to_string(),
            ),
            (
                "GARRISON_HOME".to_owned(),
                dir.path().join("host-state").display().to_string(),
            ),
            ("DEVIN_OUTPOSTS_TOKEN".to_owned(), emu.account_token()),
            ("RUST_LOG".to_owned(), "info".to_owned()),
        ];
        env.extend(modal_env(&mock));
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
            mock,
            env,
            serve_args,
            outpost,
            _dir: dir,
        }
    }

    fn secrets(&self) -> [String; 3] {
        [
            self.emu.account_token(),
            self.mock.token_id().to_owned(),
            self.mock.token_secret().to_owned(),
        ]
    }

    /// `garrison deploy modal <args>`, with the serve options when `args`
    /// is empty; deploy never prints a secret.
    async fn deploy(&self, args: &[&str]) -> Output {
        let mut command = tokio::process::Command::new(garrison_bin());
        command
            .args(["deploy", "modal"])
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
        for secret in self.secrets() {
            assert!(
                !text.contains(&secret),
                "a secret in deploy's output:\n{text}"
            );
        }
        output
    }

    /// A raw client of the mock, to act as Modal itself would.
    fn rpc(&self) -> modal::Rpc {
        modal::Client::new(&modal::ClientConfig {
            api_url: self.mock.url(),
            credentials: modal::Credentials {
                token_id: ::common::Secret::new(self.mock.token_id()),
                token_secret: ::common::Secret::new(self.mock.token_secret()),
            },
            retry: modal::RetryPolicy::default(),
        })
        .unwrap()
        .rpc()
    }

    /// Ends a sandbox as Modal does at its lifetime.
    async fn end(&self, sandbox_id: &str) {
        self.rpc()
            .sandbox_terminate(modal::wire::SandboxTerminateRequest {
                sandbox_id: sandbox_id.to_owned(),
            })
            .await
            .unwrap();
    }

    /// The running sandboxes named `NAME`.
    fn deployments(&self) -> Vec<modal_mock::SandboxView> {
        self.mock
            .sandboxes()
            .into_iter()
            .filter(|s| s.running && s.name.as_deref() == Some(NAME))
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
async fn deploy_serves_from_a_sandbox_keeps_it_and_terminates_and_deploys_again() {
    let host = Host::new().await;

    // First run: the Secret, the sandbox, serve in it.
    let first = host.deploy(&[]).await;
    assert!(first.status.success(), "{}", text(&first));
    let out = stdout(&first);
    assert!(
        out.contains("wrote Modal Secret garrison-orchestrator-env"),
        "{out}"
    );
    assert!(
        out.contains("created sandbox garrison-orchestrator"),
        "{out}"
    );
    assert!(out.contains("started garrison serve"), "{out}");
    let deployed = host.deployments();
    assert_eq!(deployed.len(), 1, "{deployed:?}");
    let orchestrator = deployed[0].clone();
    assert_eq!(host.mock.secret_names(), ["garrison-orchestrator-env"]);

    // The credentials reach it only through the Secret: not in the entry
    // point, not in the files copied in.
    assert_eq!(orchestrator.definition.secret_ids.len(), 1);
    let argv = orchestrator.definition.entrypoint_args.join(" ");
    assert!(argv.contains("serve --backend modal"), "{argv}");
    for secret in host.secrets() {
        assert!(!argv.contains(&secret), "a secret in the entry point");
        let found = grep_tree(&orchestrator.dir, secret.as_bytes());
        assert!(
            found.is_empty(),
            "a secret in the sandbox's files: {found:?}"
        );
    }

    // The deployed Garrison serves a session; the session's sandbox has
    // no Secret and its processes see none of the credentials.
    let session = session(
        &host.emu,
        &host.outpost,
        vec![run("env; echo done")],
        Then::End,
    );
    wait_until("the deployed serve ran the session", None, || {
        status_is(&host.emu, &session, SessionStatus::Terminated) && released(&host.emu, &session)
    })
    .await;
    let outputs = step_outputs(&host.emu, &session).join("\n");
    assert!(
        outputs.contains("PATH=") && outputs.contains("done"),
        "the step printed its environment: {outputs}"
    );
    for secret in host.secrets() {
        assert!(
            !outputs.contains(&secret),
            "a credential in a session's environment:\n{outputs}"
        );
    }
    let sessions: Vec<_> = host
        .mock
        .sandboxes()
        .into_iter()
        .filter(|s| s.id != orchestrator.id)
        .collect();
    assert!(
        !sessions.is_empty(),
        "the session ran in a sandbox of its own"
    );
    for s in &sessions {
        assert!(s.definition.secret_ids.is_empty(), "{:?}", s.name);
    }

    // Second run: the running one is left alone.
    let second = host.deploy(&[]).await;
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        stdout(&second).contains("nothing to do"),
        "{}",
        text(&second)
    );
    let again = host.deployments();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, orchestrator.id);
    // The deployment's own sandbox, and one per session (those through
    // SandboxCreateV2, as the backend creates them).
    assert_eq!(
        (host.mock.calls("SandboxCreate") + host.mock.calls("SandboxCreateV2")) as usize,
        1 + sessions.len()
    );
    // The Secret is written when a sandbox is created, not on every tick.
    assert_eq!(host.mock.calls("SecretGetOrCreate"), 1);

    // --status and --logs.
    let status = host.deploy(&["--status"]).await;
    assert!(status.status.success(), "{}", text(&status));
    let out = stdout(&status);
    assert!(
        out.contains(&orchestrator.id) && out.contains("uptime"),
        "{out}"
    );
    assert!(out.contains("serve:    running"), "{out}");
    let logs = host.deploy(&["--logs"]).await;
    assert!(logs.status.success(), "{}", text(&logs));
    assert!(
        stdout(&logs).contains(&session),
        "the serve's output names the session it ran:\n{}",
        text(&logs)
    );

    // --terminate ends it and deletes the Secret.
    let gone = host.deploy(&["--terminate"]).await;
    assert!(gone.status.success(), "{}", text(&gone));
    assert!(host.deployments().is_empty());
    assert!(host.mock.secret_names().is_empty());
    let none = host.deploy(&["--status"]).await;
    assert_eq!(none.status.code(), Some(3), "{}", text(&none));

    // Deployed again: a new sandbox, a new Secret, and it serves.
    let third = host.deploy(&[]).await;
    assert!(third.status.success(), "{}", text(&third));
    let redeployed = host.deployments();
    assert_eq!(redeployed.len(), 1);
    assert_ne!(redeployed[0].id, orchestrator.id);
    assert_eq!(host.mock.secret_names(), ["garrison-orchestrator-env"]);
    let later = common::session(&host.emu, &host.outpost, vec![run("echo again")], Then::End);
    wait_until("the redeployed serve ran a session", None, || {
        status_is(&host.emu, &later, SessionStatus::Terminated) && released(&host.emu, &later)
    })
    .await;
    let end = host.deploy(&["--terminate"]).await;
    assert!(end.status.success(), "{}", text(&end));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_ended_by_modal_or_left_half_made_is_mended_by_the_next_keep_alive_run() {
    let host = Host::new().await;
    let first = host.deploy(&[]).await;
    assert!(first.status.success(), "{}", text(&first));
    let old = host.deployments()[0].clone();
    // A session is running when Modal ends the orchestrator's sandbox (its
    // lifetime, say): serve goes with it, and the next run creates a new
    // one, which knows the session's claim as its own (the same acceptor
    // id) and adopts it rather than leaving it to lapse.
    let held = session(&host.emu, &host.outpost, vec![run("sleep 600")], Then::End);
    wait_until("the first serve runs the session", None, || {
        view(&host.emu, &held).events("step").count() == 0
            && view(&host.emu, &held).events("claimed").count() == 1
            && status_is(&host.emu, &held, SessionStatus::Running)
    })
    .await;
    host.end(&old.id).await;
    let down = host.deploy(&["--status"]).await;
    assert_eq!(down.status.code(), Some(3), "{}", text(&down));
    let tick = host.deploy(&[]).await;
    assert!(tick.status.success(), "{}", text(&tick));
    assert!(stdout(&tick).contains("created sandbox"), "{}", text(&tick));
    let now = host.deployments();
    assert_eq!(now.len(), 1);
    assert_ne!(now[0].id, old.id);
    let up = host.deploy(&["--status"]).await;
    assert!(up.status.success(), "{}", text(&up));
    let log = now[0].dir.join("garrison-deploy/serve.log");
    wait_until("the new serve adopts the session's claim", None, || {
        std::fs::read_to_string(&log).is_ok_and(|text| {
            text.lines()
                .any(|l| l.contains("adopting a claim") && l.contains(&held))
        })
    })
    .await;

    // A deploy that stopped after creating the sandbox and before copying
    // garrison in: the next run copies it in and serve starts.
    host.end(&now[0].id).await;
    let half_made = host
        .rpc()
        .sandbox_create(modal::wire::SandboxCreateRequest {
            app_id: old.app_id.clone(),
            definition: Some(now[0].definition.clone()),
            tags: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox_id;
    let waiting = host.deploy(&["--status"]).await;
    assert_eq!(waiting.status.code(), Some(3), "{}", text(&waiting));
    assert!(
        stdout(&waiting).contains("not started"),
        "{}",
        text(&waiting)
    );
    let mend = host.deploy(&[]).await;
    assert!(mend.status.success(), "{}", text(&mend));
    assert!(stdout(&mend).contains("copying it in"), "{}", text(&mend));
    assert_eq!(host.deployments()[0].id, half_made);
    let serving = host.deploy(&["--status"]).await;
    assert!(serving.status.success(), "{}", text(&serving));
    let gone = host.deploy(&["--terminate"]).await;
    assert!(gone.status.success(), "{}", text(&gone));
}

/// The Modal environment is the one the settings name, as for Modal's own
/// client: the deployment's Secret (and app) live there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_uses_the_modal_environment_the_settings_name() {
    let mut host = Host::new().await;
    host.env
        .push(("MODAL_ENVIRONMENT".to_owned(), "staging".to_owned()));
    let out = host.deploy(&[]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        host.mock.secret_qualified_names(),
        [format!("staging/{NAME}-env")]
    );
    let status = host.deploy(&["--status"]).await;
    assert!(status.status.success(), "{}", text(&status));
    let gone = host.deploy(&["--terminate"]).await;
    assert!(gone.status.success(), "{}", text(&gone));
    assert!(host.mock.secret_qualified_names().is_empty());
}

#[tokio::test]
async fn deploy_modal_help_teaches_the_modes_credentials_and_keep_alive() {
    let output = std::process::Command::new(garrison_bin())
        .args(["deploy", "modal", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "--status",
        "--logs",
        "--terminate",
        "-f, --follow",
        "MODAL_TOKEN_ID",
        "DEVIN_OUTPOSTS_TOKEN",
        "Modal Secret",
        "never on a command line",
        "*/5 * * * *",
        "garrison-deploy-modal.timer",
        "-- --max-concurrent",
        "24 h",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

#[tokio::test]
async fn deploy_modal_refuses_forwarded_flags_it_sets_and_a_bad_name() {
    for args in [
        &["deploy", "modal", "--", "--backend", "local"][..],
        &["deploy", "modal", "--", "--token", "x"][..],
        &["deploy", "modal", "--name", "not a name"][..],
    ] {
        let output = std::process::Command::new(garrison_bin())
            .args(args)
            .env_clear()
            .env("MODAL_TOKEN_ID", "ak-unused")
            .env("MODAL_TOKEN_SECRET", "as-unused")
            .env("DEVIN_OUTPOSTS_TOKEN", "cog_unused")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(
            err.contains("--backend") || err.contains("--token") || err.contains("--name"),
            "{args:?}: {err}"
        );
        for secret in ["cog_unused", "ak-unused", "as-unused"] {
            assert!(!err.contains(secret), "{err}");
        }
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
async fn logs_follow_goes_on_with_the_sandbox_the_keep_alive_creates() {
    let host = Host::new().await;
    let first = host.deploy(&[]).await;
    assert!(first.status.success(), "{}", text(&first));
    let old = host.deployments()[0].id.clone();

    let mut follower = tokio::process::Command::new(garrison_bin())
        .args(["deploy", "modal", "--logs", "-f"])
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

    // Modal ends the sandbox; the follower waits; the keep-alive creates
    // the next one and the follower goes on with its log.
    host.end(&old).await;
    let tick = host.deploy(&[]).await;
    assert!(tick.status.success(), "{}", text(&tick));
    let after = session(&host.emu, &host.outpost, vec![run("echo two")], Then::End);
    wait_until(
        "the follower shows the session of the new sandbox",
        None,
        || seen.lock().unwrap().contains(&after),
    )
    .await;
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follower gave up"
    );
    let printed = seen.lock().unwrap().clone();
    assert_eq!(
        printed.matches("garrison serving").count(),
        2,
        "each sandbox's log printed once:\n{printed}"
    );
    let _ = follower.kill().await;
    let end = host.deploy(&["--terminate"]).await;
    assert!(end.status.success(), "{}", text(&end));
}
