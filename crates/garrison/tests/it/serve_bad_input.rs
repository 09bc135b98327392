//! `garrison serve` given what retrying cannot fix, end to end: the real
//! binary against the in-process emulator. An unknown outpost, a refused
//! token or an unwritable state directory ends it with exit code 78 and a
//! message that says what to do; an unreachable API is retried with its
//! cause shown; a taken admin port names `--listen`; a token revoked after
//! start makes it not ready (`status` exits 1) and leaves running sessions
//! alone. Every request goes to 127.0.0.1.

use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use crate::common::*;
use emulator::{Emulator, Then};
use orchestrator::Stage;

/// EX_CONFIG: what `garrison` exits with on a configuration error.
const EX_CONFIG: i32 = 78;

/// `serve`'s arguments as the harness gives them, with these changed.
fn serve_args(api_url: &str, outpost: &str, state: &Path, listen: &str) -> Vec<String> {
    [
        "serve",
        "--outpost",
        outpost,
        "--api-url",
        api_url,
        "--static-base-url",
        &format!("{api_url}/static/devin-rs/remote/"),
        "--state-dir",
        &state.display().to_string(),
        "--backend",
        "host",
        "--listen",
        listen,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The process's exit status, waiting at most [`HANG_GUARD`].
async fn wait_exit(g: &mut Garrison) -> ExitStatus {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        if let Some(status) = g.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "garrison did not exit\n{}",
            g.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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

/// `garrison status --admin URL` to its end.
fn status(home: &Path, admin: &str) -> Output {
    Command::new(garrison_bin())
        .args(["status", "--admin", admin])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GARRISON_CONFIG", home.join("no-config"))
        .stdin(Stdio::null())
        .output()
        .expect("garrison status runs")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Starts `serve` with these arguments and `DEVIN_OUTPOSTS_TOKEN=token`,
/// and waits for it to exit by itself.
async fn serve_until_exit(
    emu: &Emulator,
    state: &Path,
    args: Vec<String>,
    token: &str,
) -> (ExitStatus, String) {
    let mut g = Garrison::start_with_args_and_env(
        emu,
        state,
        args,
        vec![("DEVIN_OUTPOSTS_TOKEN".into(), token.into())],
    );
    let status = wait_exit(&mut g).await;
    (status, g.log())
}

#[tokio::test]
async fn an_unknown_outpost_exits_78_naming_the_outpost_the_api_and_the_fix() {
    let emu = emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let unknown = "outpost_env-000000000000";
    let args = serve_args(&emu.base_url(), unknown, &state, "127.0.0.1:0");
    let (status, log) = serve_until_exit(&emu, &state, args, &emu.account_token()).await;
    assert_eq!(status.code(), Some(EX_CONFIG), "{log}");
    let error = log
        .lines()
        .find(|l| l.starts_with("Error: "))
        .unwrap_or_else(|| panic!("no error line:\n{log}"));
    assert!(error.contains(unknown), "{error}");
    assert!(error.contains(&emu.base_url()), "{error}");
    assert!(error.contains("does not exist"), "{error}");
    assert!(error.contains("garrison outposts list"), "{error}");
    assert!(
        !log.contains("retrying"),
        "it gave up at once rather than retrying:\n{log}"
    );
    assert!(
        !log.contains("admin listening"),
        "it checked before serving:\n{log}"
    );
}

#[tokio::test]
async fn a_refused_token_exits_78_and_so_does_one_without_the_machine_scope() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();

    let state = dir.path().join("wrong");
    let args = serve_args(&emu.base_url(), &outpost, &state, "127.0.0.1:0");
    let wrong = "cog_not_a_token_this_emulator_issued";
    let (status, log) = serve_until_exit(&emu, &state, args, wrong).await;
    assert_eq!(status.code(), Some(EX_CONFIG), "{log}");
    assert!(log.contains("refused the token (401)"), "{log}");
    assert!(
        log.contains(&outpost) && log.contains(&emu.base_url()),
        "{log}"
    );
    assert!(log.contains("garrison connect"), "{log}");
    assert!(!log.contains(wrong), "the token was printed:\n{log}");

    let state = dir.path().join("scopeless");
    let args = serve_args(&emu.base_url(), &outpost, &state, "127.0.0.1:0");
    // The orchestrator scope implies the machine scope (Devin's reference,
    // "Authentication"): only a token with neither lacks it.
    let scopeless = emu.mint_token(&[]);
    let (status, log) = serve_until_exit(&emu, &state, args, &scopeless).await;
    assert_eq!(status.code(), Some(EX_CONFIG), "{log}");
    assert!(
        log.contains("(403)") && log.contains("account.outposts.machine"),
        "{log}"
    );
}

#[tokio::test]
async fn a_bad_setting_or_a_malformed_config_file_exits_78_naming_it() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut args = serve_args(&emu.base_url(), &outpost, &state, "127.0.0.1:0");
    args.extend(["--cpus".into(), "0".into()]);
    let (status, log) = serve_until_exit(&emu, &state, args, &emu.account_token()).await;
    assert_eq!(status.code(), Some(EX_CONFIG), "{log}");
    assert!(log.contains("invalid --cpus"), "{log}");

    let file = dir.path().join("garrison.toml");
    std::fs::write(&file, "max_concurrent = [oops\n").unwrap();
    let mut args = serve_args(&emu.base_url(), &outpost, &state, "127.0.0.1:0");
    args.extend(["--config".into(), file.display().to_string()]);
    let (status, log) = serve_until_exit(&emu, &state, args, &emu.account_token()).await;
    assert_eq!(status.code(), Some(EX_CONFIG), "{log}");
    assert!(log.contains(&file.display().to_string()), "{log}");
    assert!(!log.contains("Stack backtrace"), "{log}");
}

#[tokio::test]
async fn an_unreachable_api_is_retried_with_its_cause_shown_and_serve_is_not_ready() {
    let emu = emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // Bound, then closed: connecting there is refused.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let api = format!("http://127.0.0.1:{closed}");
    let args = serve_args(&api, "outpost_env-000000000000", &state, "127.0.0.1:0");
    let mut g = Garrison::start_with_args(&emu, &state, args);
    wait_until("the cause in the log", Some(&g), || {
        g.log().contains("listing the queue failed; retrying")
    })
    .await;
    let log = g.log();
    let line = log
        .lines()
        .find(|l| l.contains("listing the queue failed; retrying"))
        .unwrap();
    assert!(
        line.contains("GET /devins: transport error: connection refused: "),
        "{line}"
    );
    assert!(line.contains(&format!("127.0.0.1:{closed}")), "{line}");
    assert!(
        log.contains("the fleet API does not answer; serving anyway"),
        "{log}"
    );
    assert_eq!(
        g.child.try_wait().unwrap(),
        None,
        "an unreachable API is not a configuration error:\n{log}"
    );
    let out = status(dir.path(), &admin_url(&g).await);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("NOT READY") && stdout.contains("not been listed"),
        "{}",
        text(&out)
    );
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn an_unwritable_state_directory_exits_78_naming_it_and_the_user() {
    use std::os::unix::fs::PermissionsExt;
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let args = serve_args(&emu.base_url(), &outpost, &state, "127.0.0.1:0");
    // Root may write anywhere: as root, run it as nobody in a directory
    // root owns; otherwise take the write bit away from ourselves.
    let prefix: Vec<String> = if is_root() {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]
        .map(String::from)
        .to_vec()
    } else {
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o555)).unwrap();
        vec![]
    };
    let mut argv = prefix;
    argv.push(garrison_bin().to_owned());
    argv.extend(args);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &state)
        .env("DEVIN_OUTPOSTS_TOKEN", emu.account_token())
        .env("GARRISON_CONFIG", state.join("no-config"))
        .stdin(Stdio::null())
        .output()
        .expect("garrison runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EX_CONFIG), "{}", text(&out));
    assert!(
        stderr.contains(&format!(
            "cannot write {}: permission denied (garrison runs as ",
            state.display()
        )),
        "{}",
        text(&out)
    );
    assert!(stderr.contains("uid "), "{}", text(&out));
    assert!(!stderr.contains("code 14"), "{}", text(&out));
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
}

#[tokio::test]
async fn a_taken_admin_address_names_listen() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let args = serve_args(&emu.base_url(), &outpost, &state, &addr);
    let (status, log) = serve_until_exit(&emu, &state, args, &emu.account_token()).await;
    assert_eq!(status.code(), Some(1), "{log}");
    let error = log
        .lines()
        .find(|l| l.starts_with("Error: "))
        .unwrap_or_else(|| panic!("no error line:\n{log}"));
    assert!(
        error.contains(&format!("{addr} (--listen): the address is in use")),
        "{error}"
    );
    drop(taken);
}

/// After start, a refusal is no exit: the outpost is not ready, `status`
/// exits 1 and says why, the refusal is logged at error level (not at
/// every retry), and the running session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_after_start_makes_serve_not_ready_and_leaves_sessions_running() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--relist-interval-secs".into(), "1".into()],
        },
    );
    let id = session(&emu, &outpost, vec![run("true")], Then::Wait);
    wait_until("running", Some(&g), || view(&emu, &id).steps_done == 1).await;
    let admin = admin_url(&g).await;
    let home = dir.path();
    let mut out = status(home, &admin);
    wait_until("ready", Some(&g), || {
        out = status(home, &admin);
        out.status.code() == Some(0)
    })
    .await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(" ready,"),
        "{}",
        text(&out)
    );

    let revoked_at = std::time::Instant::now();
    assert!(emu.revoke_token(&emu.account_token()));
    wait_until("not ready", Some(&g), || {
        out = status(home, &admin);
        out.status.code() == Some(1)
    })
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("NOT READY"), "{}", text(&out));
    assert!(
        stdout.contains(&format!("not ready: outpost {outpost}: "))
            && stdout.contains("refused the token (401)"),
        "{}",
        text(&out)
    );

    // Several refused lists later, one error line.
    const RETRY: &str = "the fleet API still refuses this queue";
    wait_until("refused again", Some(&g), || {
        g.log().matches(RETRY).count() >= 3
    })
    .await;
    let log = g.log();
    let errors = log
        .lines()
        .filter(|l| l.contains("ERROR") && l.contains("refused the token (401) when listing"))
        .count();
    if revoked_at.elapsed() < orchestrator::LOG_EVERY {
        assert_eq!(errors, 1, "{log}");
    } else {
        assert!(errors >= 1, "{log}");
    }
    assert_eq!(
        g.child.try_wait().ok().flatten(),
        None,
        "serve exited:\n{log}"
    );
    // The session is untouched: its remote connected, its record running.
    assert!(view(&emu, &id).connected, "{log}");
    let stage = g.store().session(&sid(&id)).unwrap().map(|s| s.stage);
    assert_eq!(stage, Some(Stage::Running), "{log}");
}
