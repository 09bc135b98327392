//! The command-line conventions every command keeps, tried on the real
//! binary: a reader that closes stdout early ends a command quietly,
//! `--json` output parses, `-q`/`-v` change what reaches stderr, shell
//! completions and man pages are generated, and a negative number is a
//! value refused by its setting's name, not an unknown flag. The daemon's
//! side is a state directory written here through the store's API (the
//! admin URL given is one where nothing listens) or the emulator.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use orchestrator::{Finish, SessionRecord, Stage, Store};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::common;
use crate::common::{HANG_GUARD, garrison_bin, sid};

/// Nothing listens here: the commands read the state directory.
const DEAD_ADMIN: &str = "http://127.0.0.1:1";
/// Enough rows that every listing is far bigger than a pipe's buffer, so
/// the writer meets the closed pipe whatever the timing.
const SESSIONS: usize = 2_000;
const LOGGED: &str = "devin-logged";

/// `garrison ARGS` in a clean environment under `home`.
fn garrison(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(garrison_bin());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GARRISON_CONFIG", home.join("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

async fn run(home: &Path, args: &[&str]) -> Ran {
    let out = tokio::time::timeout(HANG_GUARD, garrison(home, args).output())
        .await
        .expect("garrison finishes")
        .expect("garrison runs");
    Ran {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `args` with a reader that takes one line of stdout and closes it.
async fn read_one_line_and_close(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut child = garrison(home, args)
        .envs(env.iter().copied())
        .spawn()
        .expect("garrison starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(HANG_GUARD, stdout.read_line(&mut first))
        .await
        .expect("a first line")
        .unwrap();
    drop(stdout);
    let out = tokio::time::timeout(HANG_GUARD, child.wait_with_output())
        .await
        .expect("garrison ends once its reader is gone")
        .unwrap();
    Ran {
        status: out.status,
        stdout: first,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A state directory as a stopped daemon left it: many finished sessions
/// (each on its own outpost, so `status` lists many outposts too), and one
/// with events and a long output log.
fn state_dir(root: &Path) -> PathBuf {
    let state = root.join("state");
    let store = Store::open(&orchestrator::db_path(&state)).unwrap();
    for i in 0..SESSIONS {
        let mut rec = SessionRecord::new(
            &sid(&format!("devin-{i:05}")),
            &format!("outpost_env-{i:05}"),
            "new".into(),
            "host",
            1_000_000 + i as i64,
        );
        rec.stage = Stage::Done(Finish::Terminated);
        store.put_session(&rec).unwrap();
    }
    let mut rec = SessionRecord::new(&sid(LOGGED), "outpost_env-logged", "new".into(), "host", 5);
    rec.stage = Stage::Done(Finish::Terminated);
    store.put_session(&rec).unwrap();
    for n in 0..3 {
        store
            .add_event(
                &sid(LOGGED),
                10 + n,
                "remote_started",
                &serde_json::json!({ "restart": n }),
            )
            .unwrap();
    }
    let log_dir = state.join("sessions").join(sandbox::hashed_id(LOGGED));
    std::fs::create_dir_all(&log_dir).unwrap();
    let log: String = (0..20_000).map(|i| format!("output line {i}\n")).collect();
    std::fs::write(log_dir.join(orchestrator::REMOTE_LOG), log).unwrap();
    state
}

/// `count` unnamed local images, written in the image store's layout
/// (`store/<id>/image.json`), and one named `default`.
fn images(state: &Path, count: usize) {
    let images = state.join("images");
    for i in 0..count {
        let id = format!("sha256-{i:064x}");
        let dir = images.join("store").join(&id);
        std::fs::create_dir_all(dir.join("rootfs")).unwrap();
        let image = serde_json::json!({
            "id": id,
            "name": "",
            "rootfs": dir.join("rootfs"),
            "created_at_ms": 1_700_000_000_000i64 + i as i64,
            "size_bytes": 250_000_000u64 + i as u64,
            "chrome_path": null,
            "source": format!("recipe:{i:016x}"),
        });
        std::fs::write(dir.join("image.json"), image.to_string()).unwrap();
    }
    std::fs::create_dir_all(images.join("names")).unwrap();
    std::fs::write(
        images.join("names").join("default"),
        format!("sha256-{:064x}\n", 0),
    )
    .unwrap();
}

fn assert_quiet_end(what: &str, ran: &Ran, codes: &[i32]) {
    assert!(
        ran.status.code().is_some_and(|c| codes.contains(&c)),
        "{what}: ended with {:?} (want one of {codes:?}); stderr:\n{}",
        ran.status,
        ran.stderr
    );
    assert!(ran.stderr.is_empty(), "{what}: stderr:\n{}", ran.stderr);
    assert!(!ran.stdout.is_empty(), "{what}: no first line");
}

#[tokio::test]
async fn commands_end_quietly_when_their_reader_closes_early() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let state = state_dir(home);
    images(&state, 2_500);
    let state_arg = state.display().to_string();
    let source = ["--admin", DEAD_ADMIN, "--state-dir", &state_arg];

    // (what, args, exit codes that are right for it)
    let cases: Vec<(&str, Vec<&str>, &[i32])> = vec![
        ("--help", vec!["serve", "--help"], &[0]),
        ("completions bash", vec!["completions", "bash"], &[0]),
        (
            "image ls --json",
            vec!["image", "ls", "--json", "--state-dir", &state_arg],
            &[0],
        ),
        (
            "image ls",
            vec!["image", "ls", "--state-dir", &state_arg],
            &[0],
        ),
        (
            "sessions --json",
            [&["-q", "sessions", "--all", "--json"][..], &source].concat(),
            &[0],
        ),
        (
            "sessions",
            [&["-q", "sessions", "--all"][..], &source].concat(),
            &[0],
        ),
        (
            "logs",
            [&["-q", "logs", LOGGED][..], &source].concat(),
            &[0],
        ),
        (
            "logs --json",
            [&["-q", "logs", "--json", LOGGED][..], &source].concat(),
            &[0],
        ),
        // Its exit status says how the daemon is: not reachable here.
        (
            "status --json",
            [&["-q", "status", "--json"][..], &source].concat(),
            &[0, 2],
        ),
        // Still printed with println!, which panics on a closed stdout:
        // that panic ends the command quietly too. Last: it removes the
        // unnamed images the listings above show.
        (
            "image prune",
            vec!["image", "prune", "--state-dir", &state_arg],
            &[0],
        ),
    ];
    for (what, args, codes) in &cases {
        let ran = read_one_line_and_close(home, args, &[]).await;
        assert_quiet_end(what, &ran, codes);
    }

    // Without -q the one line that says where the rows came from stays,
    // and nothing about the pipe is added to it.
    let ran = read_one_line_and_close(home, &[&["logs", LOGGED][..], &source].concat(), &[]).await;
    assert!(ran.status.success(), "{:?} {}", ran.status, ran.stderr);
    let lines: Vec<&str> = ran.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", ran.stderr);
    assert!(
        lines[0].starts_with("daemon not reachable at"),
        "{}",
        ran.stderr
    );
}

#[tokio::test]
async fn outposts_list_ends_quietly_when_its_reader_closes_early() {
    let emu = common::emulator().await;
    for i in 0..1_000 {
        emu.create_outpost(&format!("lab-{i:04}"), fleet::Platform::Linux);
    }
    let dir = tempfile::tempdir().unwrap();
    let base = emu.base_url();
    let token = emu.account_token();
    let env = [("DEVIN_OUTPOSTS_TOKEN", token.as_str())];
    for json in [false, true] {
        let mut args = vec!["outposts", "list", "--api-url", &base];
        if json {
            args.push("--json");
        }
        let ran = read_one_line_and_close(dir.path(), &args, &env).await;
        assert_quiet_end("outposts list", &ran, &[0]);
    }
}

#[tokio::test]
async fn listings_print_json_with_their_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let state = state_dir(home);
    images(&state, 2);
    let state_arg = state.display().to_string();
    let source = ["--admin", DEAD_ADMIN, "--state-dir", &state_arg];

    let ran = run(home, &["image", "ls", "--json", "--state-dir", &state_arg]).await;
    assert!(ran.status.success(), "{}", ran.stderr);
    let images: Vec<Value> = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(images.len(), 2, "{}", ran.stdout);
    assert_eq!(images[0]["name"], "default");
    assert_eq!(images[1]["name"], Value::Null);
    for field in [
        "id",
        "size_bytes",
        "created_at_ms",
        "chrome_path",
        "xvfb_path",
        "source",
        "rootfs",
    ] {
        assert!(images[0].get(field).is_some(), "no {field}: {}", images[0]);
    }
    assert_eq!(images[1]["size_bytes"], 250_000_001u64);

    let ran = run(
        home,
        &[&["sessions", "--all", "--json"][..], &source].concat(),
    )
    .await;
    assert!(ran.status.success(), "{}", ran.stderr);
    let rows: Vec<Value> = serde_json::from_str(&ran.stdout).unwrap();
    assert_eq!(rows.len(), SESSIONS + 1);
    assert_eq!(rows[0]["session_id"], format!("devin-{:05}", SESSIONS - 1));
    assert_eq!(rows[0]["stage"], "terminated");

    let ran = run(home, &[&["status", "--json"][..], &source].concat()).await;
    let status: Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", ran.stdout, ran.stderr));
    assert_eq!(status["ready"], false);
    assert_eq!(status["counts"]["terminated"], SESSIONS as u64 + 1);
    assert_eq!(status["outposts"].as_array().unwrap().len(), SESSIONS + 1);

    // JSON lines: the events, then the output, one object per line.
    let ran = run(
        home,
        &[&["logs", "--json", "-n", "2", LOGGED][..], &source].concat(),
    )
    .await;
    assert!(ran.status.success(), "{}", ran.stderr);
    let lines: Vec<Value> = ran
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 4, "{}", ran.stdout);
    assert_eq!(lines[0]["type"], "event");
    assert_eq!(lines[0]["kind"], "remote_started");
    assert_eq!(lines[0]["detail"]["restart"], 1);
    assert_eq!(lines[1]["at_ms"], 12);
    assert!(lines[1]["id"].is_i64(), "{}", lines[1]);
    assert_eq!(lines[2]["type"], "output");
    assert_eq!(lines[2]["text"], "output line 19998\n");
    assert_eq!(lines[3]["text"], "output line 19999\n");
}

#[tokio::test]
async fn doctor_prints_its_checks_as_json() {
    let emu = common::emulator().await;
    let op = common::outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let base = emu.base_url();
    let args = [
        "doctor",
        "--json",
        "--api-url",
        &base,
        "--outpost",
        &op,
        "--backend",
        "host",
        "--state-dir",
        &state,
    ];
    let token = emu.account_token();
    let out = garrison(dir.path(), &args)
        .env("DEVIN_OUTPOSTS_TOKEN", &token)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(out.status.success(), "{text}");
    assert_eq!(report["ok"], true, "{text}");
    assert_eq!(report["required_failed"], 0);
    let checks: Vec<&Value> = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["checks"].as_array().unwrap())
        .collect();
    for check in &checks {
        assert!(
            ["pass", "fail", "warn", "info"].contains(&check["outcome"].as_str().unwrap()),
            "{check}"
        );
        assert!(
            check["name"].is_string() && check["detail"].is_string(),
            "{check}"
        );
        assert!(check["required"].is_boolean(), "{check}");
    }
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "token present" && c["outcome"] == "pass"),
        "{text}"
    );
    assert!(!text.contains(&token));

    // A failing report is JSON too, and still exits 1.
    let out = garrison(dir.path(), &args)
        .env("DEVIN_OUTPOSTS_TOKEN", "cog_refused")
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(report["ok"], false);
    assert!(report["required_failed"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn completions_name_the_commands_for_each_shell() {
    let dir = tempfile::tempdir().unwrap();
    let ran = run(dir.path(), &["completions", "bash"]).await;
    assert!(ran.status.success(), "{}", ran.stderr);
    assert!(ran.stderr.is_empty(), "{}", ran.stderr);
    for word in [
        "garrison",
        "serve",
        "sessions",
        "completions",
        "--max-concurrent",
    ] {
        assert!(ran.stdout.contains(word), "no {word} in the bash script");
    }
    for shell in ["zsh", "fish"] {
        let ran = run(dir.path(), &["completions", shell]).await;
        assert!(ran.status.success(), "{shell}: {}", ran.stderr);
        assert!(ran.stdout.contains("serve"), "{shell}: {}", ran.stdout);
    }
    let ran = run(dir.path(), &["completions", "tcsh"]).await;
    assert_eq!(ran.status.code(), Some(2), "{}", ran.stderr);
    assert!(ran.stderr.contains("possible values"), "{}", ran.stderr);
}

#[tokio::test]
async fn man_writes_a_roff_page_per_command() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    let pages_arg = pages.display().to_string();
    let ran = run(dir.path(), &["man", &pages_arg]).await;
    assert!(ran.status.success(), "{}", ran.stderr);
    for name in [
        "garrison.1",
        "garrison-serve.1",
        "garrison-status.1",
        "garrison-image-build.1",
        "garrison-outposts-list.1",
        "garrison-completions.1",
        "garrison-man.1",
    ] {
        let page =
            std::fs::read_to_string(pages.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let title = page
            .lines()
            .find(|l| !l.starts_with(".ie") && !l.starts_with(".el"))
            .unwrap_or_default();
        assert!(title.starts_with(".TH "), "{name} starts with {title:?}");
        assert!(page.contains(".SH NAME"), "{name}");
        assert!(page.contains("Exit status:"), "{name}");
    }
    let serve = std::fs::read_to_string(pages.join("garrison-serve.1")).unwrap();
    assert!(serve.contains("max\\-concurrent"), "{serve}");
    // The help subcommand is not a page of its own.
    assert!(!pages.join("garrison-help.1").exists());

    // groff, where it is installed, reads every page without a warning.
    if std::process::Command::new("groff")
        .arg("--version")
        .output()
        .is_ok()
    {
        for entry in std::fs::read_dir(&pages).unwrap() {
            let path = entry.unwrap().path();
            let out = std::process::Command::new("groff")
                .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", path.display());
            assert!(
                out.stderr.is_empty(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[tokio::test]
async fn negative_numbers_are_values_refused_by_their_setting() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let out = garrison(
        dir.path(),
        &[
            "serve",
            "--outpost",
            "outpost_env-x",
            "--api-url",
            DEAD_ADMIN,
            "--state-dir",
            &state,
            "--max-concurrent",
            "-1",
        ],
    )
    .env("DEVIN_OUTPOSTS_TOKEN", "cog_unused")
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--max-concurrent") && stderr.contains("-1 is out of range 1..=10000"),
        "{stderr}"
    );
    assert!(!stderr.contains("unexpected argument"), "{stderr}");

    // A number clap reads itself is refused by clap, naming the flag.
    let ran = run(dir.path(), &["logs", "-n", "-5", "devin-x"]).await;
    assert_eq!(ran.status.code(), Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("invalid value '-5' for '--lines <N>'"),
        "{}",
        ran.stderr
    );
}

#[tokio::test]
async fn quiet_leaves_only_errors_and_verbose_adds_debug_lines() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let state = state_dir(home);
    let state_arg = state.display().to_string();
    let source = ["--admin", DEAD_ADMIN, "--state-dir", &state_arg];

    let plain = run(home, &[&["sessions"][..], &source].concat()).await;
    assert!(plain.status.success(), "{}", plain.stderr);
    assert!(
        plain.stderr.contains("daemon not reachable"),
        "{}",
        plain.stderr
    );

    // The flags are global: before or after the command.
    for args in [
        [&["-q", "sessions"][..], &source].concat(),
        [&["sessions", "--quiet"][..], &source].concat(),
    ] {
        let quiet = run(home, &args).await;
        assert!(quiet.status.success(), "{}", quiet.stderr);
        assert!(quiet.stderr.is_empty(), "{}", quiet.stderr);
        assert_eq!(quiet.stdout, plain.stdout);
    }
    // Errors still show.
    let missing = home.join("nowhere").display().to_string();
    let quiet = run(
        home,
        &[
            "-q",
            "sessions",
            "--admin",
            DEAD_ADMIN,
            "--state-dir",
            &missing,
        ],
    )
    .await;
    assert_eq!(quiet.status.code(), Some(1));
    assert!(
        quiet.stderr.contains("no state store at"),
        "{}",
        quiet.stderr
    );

    let verbose = run(home, &[&["-vv", "sessions"][..], &source].concat()).await;
    assert!(verbose.status.success(), "{}", verbose.stderr);
    assert!(verbose.stderr.contains("DEBUG"), "{}", verbose.stderr);
    assert_eq!(verbose.stdout, plain.stdout);

    let both = run(home, &["-q", "-v", "sessions"]).await;
    assert_eq!(both.status.code(), Some(2), "{}", both.stderr);
    assert!(
        both.stderr.contains("cannot be used with"),
        "{}",
        both.stderr
    );
}

/// `--version` names the release and the commit it was built from, so an
/// operator's bug report says exactly which code ran.
#[tokio::test]
async fn version_names_the_release_and_its_commit() {
    let home = tempfile::tempdir().unwrap();
    let ran = run(home.path(), &["--version"]).await;
    assert!(ran.status.success(), "{}", ran.stderr);
    let line = ran.stdout.trim_end();
    let rest = line
        .strip_prefix(concat!("garrison ", env!("CARGO_PKG_VERSION"), " (commit "))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected --version: {line:?}"));
    // Built from a git checkout (as the tests are), it is HEAD's commit.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
    match head {
        Some(head) if std::env::var_os("GARRISON_COMMIT").is_none() => assert_eq!(rest, head),
        _ => assert!(!rest.is_empty()),
    }
}
