//! `garrison serve`'s settings from the outside: a malformed configuration
//! stops it with a message naming the file and the setting, negative
//! numbers reach validation, and the log format comes from any layer
//! (flag, environment, file) with no colour escapes in a log that is not
//! a terminal.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

/// `garrison serve ARGS` with a token and an outpost that never get used:
/// the settings fail first.
fn serve(dir: &Path, args: &[&str]) -> Output {
    Command::new(garrison_bin())
        .arg("serve")
        .args(["--outpost", "op-1", "--backend", "host"])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GARRISON_CONFIG", dir.join("config"))
        .env("DEVIN_OUTPOSTS_TOKEN", "cog_settings_test")
        .output()
        .expect("garrison serve runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_malformed_configuration_file_stops_serve_naming_the_file_and_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("garrison.toml");
    let shown = file.display().to_string();
    for (text, says) in [
        ("cpus = \n", format!("invalid {shown}: line 1")),
        (
            "max_concurent = 3\n",
            format!("invalid {shown}: line 1, column 1: unknown key `max_concurent`"),
        ),
        (
            "max_concurrent = 10001\n",
            format!("invalid max_concurrent in {shown}: 10001 is out of range 1..=10000"),
        ),
        (
            "max_concurrent = -1\n",
            format!("invalid max_concurrent in {shown}: -1 is out of range 1..=10000"),
        ),
        (
            "log_format = \"xml\"\n",
            format!("invalid log_format in {shown}: \"xml\" is not text or json"),
        ),
        (
            "[[outpost]]\nid = \"op-1\"\nmemory_mb = -5\n",
            format!("invalid memory_mb of [[outpost]] \"op-1\" in {shown}: -5 is out of range"),
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = serve(dir.path(), &["--config", &shown]);
        let err = stderr(&out);
        // A configuration error: EX_CONFIG, so systemd does not restart.
        assert_eq!(out.status.code(), Some(78), "{text:?}: {err}");
        assert!(err.contains(&says), "{text:?}: expected {says:?} in {err}");
    }
    // The valid keys are listed, the backends' among them.
    std::fs::write(&file, "max_concurent = 3\n").unwrap();
    let err = stderr(&serve(dir.path(), &["--config", &shown]));
    for key in [
        "max_concurrent",
        "log_format",
        "runtime",
        "userns",
        "desktop",
    ] {
        assert!(err.contains(key), "{key} is not listed: {err}");
    }
}

#[test]
fn negative_numbers_are_values_refused_by_range() {
    let dir = tempfile::tempdir().unwrap();
    let out = serve(dir.path(), &["--max-concurrent", "-1"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("invalid --max-concurrent: -1 is out of range 1..=10000"),
        "{err}"
    );
    let out = serve(dir.path(), &["--cpus", "-2"]);
    assert!(
        stderr(&out).contains("invalid --cpus: -2 is out of range"),
        "{}",
        stderr(&out)
    );
}

/// The first lines of a serve's log once it says it is serving.
async fn log_of_serve(
    emu: &emulator::Emulator,
    dir: &Path,
    args: Vec<String>,
    env: Vec<(String, String)>,
) -> String {
    let outpost = outpost(emu);
    let state = dir.join("state");
    let mut all: Vec<String> = vec![
        "serve".into(),
        "--outpost".into(),
        outpost,
        "--api-url".into(),
        emu.base_url(),
        "--static-base-url".into(),
        emu.static_base_url(),
        "--state-dir".into(),
        state.display().to_string(),
        "--backend".into(),
        "host".into(),
    ];
    all.extend(args);
    let g = Garrison::start_with_args_and_env(emu, &state, all, env);
    wait_until("serving", Some(&g), || g.log().contains("garrison serving")).await;
    g.log()
}

#[tokio::test]
async fn the_log_format_comes_from_the_flag_the_environment_or_the_file() {
    let emu = emulator().await;
    let is_json = |log: &str| {
        log.lines()
            .filter(|l| l.contains("garrison serving"))
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    };

    // Text by default, written to a file: no colour escapes.
    let dir = tempfile::tempdir().unwrap();
    let log = log_of_serve(
        &emu,
        dir.path(),
        vec!["--listen".into(), "127.0.0.1:0".into()],
        vec![],
    )
    .await;
    assert!(!is_json(&log), "{log}");
    assert!(!log.contains("\x1b["), "colour escapes in a file: {log:?}");

    // The environment.
    let dir = tempfile::tempdir().unwrap();
    let log = log_of_serve(
        &emu,
        dir.path(),
        vec![],
        vec![
            ("GARRISON_LOG_FORMAT".into(), "json".into()),
            ("GARRISON_LISTEN".into(), "127.0.0.1:0".into()),
        ],
    )
    .await;
    assert!(is_json(&log), "{log}");

    // The file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("garrison.toml");
    std::fs::write(&file, "log_format = \"json\"\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let log = log_of_serve(
        &emu,
        dir.path(),
        vec!["--config".into(), file.display().to_string()],
        vec![],
    )
    .await;
    assert!(is_json(&log), "{log}");

    // The flag beats the environment.
    let dir = tempfile::tempdir().unwrap();
    let log = log_of_serve(
        &emu,
        dir.path(),
        vec![
            "--log-format".into(),
            "text".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        vec![("GARRISON_LOG_FORMAT".into(), "json".into())],
    )
    .await;
    assert!(!is_json(&log), "{log}");
}
