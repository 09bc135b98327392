//! `garrison doctor` against the emulator: a good token passes, a bad one
//! or one without the machine scope fails with a clear line, a credentials
//! file others can read is refused, and the clock check runs.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use tokio::process::Command;

use crate::common;
use crate::common::{emulator, garrison_bin, outpost};
use emulator::{Emulator, NewSession, SCOPE_MACHINE};

/// Runs `garrison doctor` for `outpost` with only this environment.
async fn doctor(emu: &Emulator, outpost: &str, dir: &Path, token: Option<&str>) -> Output {
    doctor_on("host", emu, outpost, dir, token).await
}

/// [`doctor`] with `--backend backend`.
async fn doctor_on(
    backend: &str,
    emu: &Emulator,
    outpost: &str,
    dir: &Path,
    token: Option<&str>,
) -> Output {
    let mut cmd = Command::new(garrison_bin());
    cmd.args(["doctor", "--api-url", &emu.base_url(), "--outpost", outpost])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--backend", backend])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GARRISON_CONFIG", dir.join("config"));
    if let Some(token) = token {
        cmd.env("DEVIN_OUTPOSTS_TOKEN", token);
    }
    // Async: the emulator answers on this test's own runtime.
    cmd.output().await.expect("garrison doctor runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_good_token_passes_every_required_check() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let out = doctor(&emu, &op, dir.path(), Some(&emu.account_token())).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    for line in [
        "✓ token present: DEVIN_OUTPOSTS_TOKEN (environment)",
        "✓ token valid: reading the queue answered",
        &format!("✓ outpost {op}: exists"),
        "✓ scope account.outposts.machine",
        "✓ scope account.outposts.orchestrator: reading an outpost answered",
        "✓ clock: within",
        "✓ host backend",
        "disk space:",
        "all required checks passed",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // Only the backend asked for is reported.
    assert!(!text.contains("Backend local"), "{text}");
    // It only reads: the state directory it was pointed at is not created,
    // and the probe left nothing behind.
    assert!(!dir.path().join("state").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains("userns-probe"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!text.contains(&emu.account_token()));
}

#[tokio::test]
async fn a_bad_token_fails_with_a_clear_line_and_exit_1() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let out = doctor(&emu, &op, dir.path(), Some("cog_not_a_real_token")).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("✗ token valid: the API refused the token (401)"),
        "{text}"
    );
    assert!(
        text.contains("-> get a new one with `garrison connect`"),
        "{text}"
    );
    // The clock is still compared: the refusal carries a Date header too.
    assert!(text.contains("✓ clock: within"), "{text}");
    assert!(text.contains("1 required check failed"), "{text}");
}

#[tokio::test]
async fn a_token_without_the_machine_scope_is_named() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    // The orchestrator scope implies the machine scope (Devin's reference,
    // "Authentication"), so only a token with neither lacks it.
    let token = emu.mint_token(&[]);
    let out = doctor(&emu, &op, dir.path(), Some(&token)).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(
            "✗ scope account.outposts.machine: reading the queue was refused (403): \
             the token lacks account.outposts.machine"
        ),
        "{text}"
    );
}

/// A serving token has the machine scope only; reading an outpost needs
/// the orchestrator scope (Devin's reference, "Outposts"), so doctor checks
/// the outpost through its queue and passes. An empty queue cannot tell an
/// unknown outpost from an idle one: a warning naming it, not a failure.
#[tokio::test]
async fn a_machine_scoped_token_passes_through_the_queue() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let token = emu.mint_token(&[SCOPE_MACHINE]);
    let out = doctor(&emu, &op, dir.path(), Some(&token)).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    for line in [
        "✓ token valid: reading the queue answered",
        "✓ scope account.outposts.machine: reading the queue answered",
        &format!("! outpost {op}: not confirmed: its queue is empty"),
        "- scope account.outposts.orchestrator: absent (reading an outpost answered 403)",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    let unknown = "outpost_env-000000000000";
    let text = stdout(&doctor(&emu, unknown, dir.path(), Some(&token)).await);
    assert!(
        text.contains(&format!("! outpost {unknown}: not confirmed")),
        "{text}"
    );

    emu.create_session(NewSession {
        outpost_id: op.clone(),
        ..Default::default()
    })
    .unwrap();
    let out = doctor(&emu, &op, dir.path(), Some(&token)).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("✓ outpost {op}: its queue has entries")),
        "{text}"
    );
}

/// With the orchestrator scope, doctor reads the outpost itself: an
/// unknown one fails by name.
#[tokio::test]
async fn an_orchestrator_token_reads_the_outpost() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let text = stdout(&doctor(&emu, &op, dir.path(), Some(&emu.account_token())).await);
    assert!(text.contains(&format!("✓ outpost {op}: exists")), "{text}");
    // Read by id (the prefix spelling, tried first and served here).
    let gets = emu
        .request_counts()
        .iter()
        .filter(|(route, _)| route.as_str() == "GET /opbeta/outposts/{id}")
        .map(|(_, n)| *n)
        .sum::<u64>();
    assert!(gets >= 1, "{:?}", emu.request_counts());
    let unknown = "outpost_env-000000000000";
    let out = doctor(&emu, unknown, dir.path(), Some(&emu.account_token())).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("✗ outpost {unknown}: does not exist")),
        "{text}"
    );
}

#[tokio::test]
async fn no_token_and_a_readable_credentials_file_are_reported() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let out = doctor(&emu, &op, dir.path(), None).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("✗ token present"), "{text}");
    assert!(text.contains("run `garrison connect`"), "{text}");

    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let creds = config.join("credentials.json");
    let json = serde_json::json!({"api_url": emu.base_url(), "token": emu.account_token()});
    std::fs::write(&creds, json.to_string()).unwrap();
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = stdout(&doctor(&emu, &op, dir.path(), None).await);
    assert!(text.contains("✗ token present"), "{text}");
    assert!(
        text.contains(&format!("-> chmod 600 {}", creds.display())),
        "{text}"
    );

    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = doctor(&emu, &op, dir.path(), None).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("(mode 0600)"), "{text}");
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn the_local_backend_is_checked_when_asked_for() {
    if !is_root() {
        eprintln!("skipped: the user-namespace probe needs root");
        return;
    }
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let out = doctor_on("local", &emu, &op, dir.path(), Some(&emu.account_token())).await;
    let text = stdout(&out);
    assert!(text.contains("Backend local (configured)"), "{text}");
    // As root, its sandboxes run in user namespaces (the probe made one
    // and an idmapped mount).
    assert!(
        text.contains("user namespaces: active: a sandbox's root is an unprivileged host uid"),
        "{text}"
    );
    assert!(!text.contains("Backend host"), "{text}");
}

#[tokio::test]
async fn as_root_the_token_is_found_in_the_units_environment_file() {
    if !is_root() {
        eprintln!("skipped: only root reads the environment file");
        return;
    }
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let env_file = config.join("env");
    let token = emu.account_token();
    std::fs::write(
        &env_file,
        format!("# the service's environment\nDEVIN_OUTPOSTS_TOKEN={token}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = doctor(&emu, &op, dir.path(), None).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "✓ environment file: {}: 1 variable read (DEVIN_OUTPOSTS_TOKEN)",
            env_file.display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "✓ token present: DEVIN_OUTPOSTS_TOKEN ({})",
            env_file.display()
        )),
        "{text}"
    );
    assert!(text.contains("✓ token valid"), "{text}");
    assert!(!text.contains(&token), "the token is printed: {text}");

    // Others may read it: ignored, and says why.
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = doctor(&emu, &op, dir.path(), None).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("! environment file"), "{text}");
    assert!(text.contains("mode 0644"), "{text}");
    assert!(text.contains("✗ token present"), "{text}");
    assert!(!text.contains(&token), "the token is printed: {text}");
}

#[tokio::test]
async fn a_malformed_configuration_file_is_named_with_its_setting() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    let file = config.join("garrison.toml");
    for (text, says) in [
        ("max_concurent = 3\n", "unknown key `max_concurent`"),
        ("max_concurrent = -1\n", "invalid max_concurrent in"),
        ("cpus = \n", "line 1"),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = doctor(&emu, &op, dir.path(), Some(&emu.account_token())).await;
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains("✗ settings: invalid"), "{text}");
        assert!(text.contains(&file.display().to_string()), "{text}");
        assert!(text.contains(says), "{text}");
    }
}

/// `garrison doctor --backend tensorlake` against the mock Tensorlake.
async fn doctor_tensorlake(emu: &Emulator, outpost: &str, dir: &Path, key: &str) -> Output {
    doctor_tensorlake_with(emu, outpost, dir, key, &[]).await
}

/// [`doctor_tensorlake`] with `extra` variables set last.
async fn doctor_tensorlake_with(
    emu: &Emulator,
    outpost: &str,
    dir: &Path,
    key: &str,
    extra: &[(&str, &str)],
) -> Output {
    let world = common::TensorlakeWorld::for_state_dir(&dir.join("state"));
    let mut cmd = Command::new(garrison_bin());
    cmd.args(["doctor", "--api-url", &emu.base_url(), "--outpost", outpost])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--backend", "tensorlake"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GARRISON_CONFIG", dir.join("config"))
        .env("DEVIN_OUTPOSTS_TOKEN", emu.account_token())
        .envs(world.env())
        .env("TENSORLAKE_API_KEY", key)
        .envs(extra.iter().copied());
    cmd.output().await.expect("garrison doctor runs")
}

#[tokio::test]
async fn the_tensorlake_backend_is_checked_against_its_api() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let out = doctor_tensorlake(&emu, &op, dir.path(), common::TENSORLAKE_KEY).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("✓ tensorlake API: credentials accepted; 0 Garrison sandboxes listed"),
        "{text}"
    );
    assert!(!dir.path().join("state").exists(), "doctor wrote state");

    let wrong = "tl_not_the_key_0000";
    let out = doctor_tensorlake(&emu, &op, dir.path(), wrong).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("✗ tensorlake API"), "{text}");
    assert!(
        text.contains("TENSORLAKE_API_KEY"),
        "the remedy names the setting: {text}"
    );
    assert!(!text.contains(wrong), "the key is printed: {text}");
}

#[tokio::test]
async fn an_unreachable_tensorlake_is_not_a_missing_key() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: connection refused.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let out = doctor_tensorlake_with(
        &emu,
        &op,
        dir.path(),
        common::TENSORLAKE_KEY,
        &[
            ("TENSORLAKE_API_URL", &closed),
            ("TENSORLAKE_SANDBOX_API_URL", &closed),
        ],
    )
    .await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("✗ tensorlake API"), "{text}");
    assert!(text.contains("the endpoint did not answer"), "{text}");
    assert!(
        !text.contains("set TENSORLAKE_API_KEY"),
        "the key is set; the remedy must not ask for it: {text}"
    );
    // Only the backend asked for.
    assert!(!text.contains("Backend local"), "{text}");
    assert!(text.contains("Backend tensorlake (configured)"), "{text}");
}

/// A CDI spec of one harmless device, /dev/null.
const CDI_SPEC: &str = r#"{"cdiVersion": "0.6.0", "kind": "example.com/null",
  "devices": [{"name": "zero", "containerEdits": {"deviceNodes": [{"path": "/dev/null"}]}}]}"#;

#[tokio::test]
async fn the_local_backend_lists_the_cdi_devices_of_the_spec_directories() {
    let emu = emulator().await;
    let op = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("cdi");
    std::fs::create_dir(&specs).unwrap();
    std::fs::write(specs.join("null.json"), CDI_SPEC).unwrap();
    std::fs::write(specs.join("broken.yaml"), "kind: [\n").unwrap();
    let run = |extra: &'static [&'static str]| {
        let mut cmd = Command::new(garrison_bin());
        cmd.args(["doctor", "--api-url", &emu.base_url(), "--outpost", &op])
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["--backend", "local", "--cdi-spec-dir"])
            .arg(&specs)
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("GARRISON_CONFIG", dir.path().join("config"))
            .env("DEVIN_OUTPOSTS_TOKEN", emu.account_token());
        cmd.output()
    };
    let text = stdout(&run(&[]).await.expect("garrison doctor runs"));
    let spec = specs.join("null.json");
    for line in [
        format!(
            "- CDI device example.com/null=zero: spec {}",
            spec.display()
        ),
        format!("! CDI spec {}:", specs.join("broken.yaml").display()),
    ] {
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }

    let out = run(&["--json", "--device", "example.com/null=one"])
        .await
        .expect("garrison doctor runs");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let checks: Vec<&serde_json::Value> = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["checks"].as_array().unwrap())
        .collect();
    let named = |name: &str| {
        *checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name} in {report}"))
    };
    assert_eq!(
        named("CDI device example.com/null=zero")["detail"],
        format!("spec {}", spec.display())
    );
    // A configured device the specs do not define fails, naming the known.
    let devices = named("devices");
    assert_eq!(devices["outcome"], "fail", "{devices}");
    let detail = devices["detail"].as_str().unwrap();
    assert!(
        detail.contains("unknown CDI device example.com/null=one")
            && detail.contains("known devices: example.com/null=zero"),
        "{detail}"
    );
    assert_eq!(out.status.code(), Some(1));
}
