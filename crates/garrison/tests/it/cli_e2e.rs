//! `garrison status`, `sessions`, `logs` and `terminate` end to end: the
//! real binary against the emulator and a real `garrison serve`, through
//! the admin API and, with the daemon unreachable, from the state store.
//! Every request goes to 127.0.0.1.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::*;
use emulator::{Script, Then};
use orchestrator::{Finish, SnapshotReason, Stage};
use serde_json::Value;

/// Nothing listens here: the commands must fall back to the state store.
const DEAD_ADMIN: &str = "http://127.0.0.1:1";

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
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    format!("http://{addr}")
}

fn cli_command(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(garrison_bin());
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GARRISON_CONFIG", home.join("no-config"))
        .stdin(Stdio::null());
    cmd
}

/// Runs a command to its end.
fn cli(home: &Path, args: &[&str]) -> Output {
    cli_command(home, args).output().expect("garrison runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

fn stage(g: &Garrison, id: &str) -> Option<Stage> {
    g.store().session(&sid(id)).ok().flatten().map(|s| s.stage)
}

/// The stage `garrison sessions --json` gives `id`.
fn listed_stage(json: &str, id: &str) -> Option<String> {
    let rows: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    rows.as_array()?
        .iter()
        .find(|r| r["session_id"] == id)
        .and_then(|r| r["stage"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn sessions_status_and_logs_read_the_daemon_and_fall_back_to_the_store() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_arg = state.display().to_string();
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    let id = session(&emu, &outpost, vec![run("echo one")], Then::End);
    wait_until("the session to end", Some(&g), || {
        stage(&g, &id) == Some(Stage::Done(Finish::Terminated))
    })
    .await;
    let admin = admin_url(&g).await;
    let home = dir.path();

    // Through the admin API.
    let out = ok(
        cli(home, &["sessions", "--json", "--admin", &admin]),
        "sessions --json",
    );
    assert_eq!(
        listed_stage(&stdout(&out), &id).as_deref(),
        Some("terminated")
    );
    assert!(!stderr(&out).contains("not reachable"), "{}", stderr(&out));
    let table = stdout(&ok(cli(home, &["sessions", "--admin", &admin]), "sessions"));
    assert!(table.starts_with("SESSION"), "{table}");
    assert!(
        table.contains(&id) && table.contains("terminated"),
        "{table}"
    );

    let logs = stdout(&ok(
        cli(home, &["logs", &id, "-n", "5", "--admin", &admin]),
        "logs -n 5",
    ));
    assert!(logs.contains("session end; exiting"), "{logs}");
    assert!(
        logs.contains("[garrison ") && logs.contains("] done"),
        "{logs}"
    );
    assert!(
        logs.lines().count() <= 10,
        "5 events and 5 lines at most:\n{logs}"
    );

    let status = stdout(&ok(cli(home, &["status", "--admin", &admin]), "status"));
    assert!(status.contains(&outpost), "{status}");
    assert!(status.contains("terminated 1"), "{status}");

    // The daemon unreachable: the same answers from the state store.
    let out = ok(
        cli(
            home,
            &[
                "sessions",
                "--json",
                "--admin",
                DEAD_ADMIN,
                "--state-dir",
                &state_arg,
            ],
        ),
        "sessions --json from the store",
    );
    assert_eq!(
        listed_stage(&stdout(&out), &id).as_deref(),
        Some("terminated")
    );
    let note = stderr(&out);
    assert!(
        note.contains("daemon not reachable") && note.contains("garrison.db"),
        "{note}"
    );
    // GARRISON_HOME stands for --state-dir.
    let out = ok(
        cli_command(home, &["logs", &id, "-n", "5", "--admin", DEAD_ADMIN])
            .env("GARRISON_HOME", &state)
            .output()
            .unwrap(),
        "logs from the store",
    );
    let logs = stdout(&out);
    assert!(logs.contains("session end; exiting"), "{logs}");
    assert!(logs.contains("] done"), "{logs}");
    // Not reachable: exit 2, with what the store holds, saying so.
    let out = cli(
        home,
        &["status", "--admin", DEAD_ADMIN, "--state-dir", &state_arg],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let status = stdout(&out);
    assert!(
        status.contains(&outpost) && status.contains("terminated 1"),
        "{status}"
    );
    assert!(
        status.contains("daemon not reachable") && stderr(&out).contains("daemon not reachable"),
        "{status}"
    );
    // Nothing to fall back on: still 2, and why.
    let out = cli(
        home,
        &[
            "status",
            "--admin",
            DEAD_ADMIN,
            "--state-dir",
            &dir.path().join("nowhere").display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("no state store"), "{}", stderr(&out));

    // Unknown sessions, and a state directory that does not exist.
    let out = cli(home, &["logs", "devin-nope", "--admin", &admin]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no session"), "{}", stderr(&out));
    let missing = dir.path().join("missing");
    let out = cli(
        home,
        &[
            "sessions",
            "--admin",
            DEAD_ADMIN,
            "--state-dir",
            &missing.display().to_string(),
        ],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no state store"), "{}", stderr(&out));
    assert!(
        !missing.exists(),
        "a reading command created the state directory"
    );
}

#[tokio::test]
async fn logs_follow_a_session_across_suspend_and_resume_and_exit_when_it_ends() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    let id = session(&emu, &outpost, vec![run("echo first")], Then::Sleep);
    wait_until("the claim", Some(&g), || stage(&g, &id).is_some()).await;
    let admin = admin_url(&g).await;

    let out_path = dir.path().join("follow.out");
    let err_path = dir.path().join("follow.err");
    let mut follower = cli_command(dir.path(), &["logs", "-f", &id, "--admin", &admin])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("garrison logs -f starts");

    wait_until("the suspend", Some(&g), || {
        stage(&g, &id) == Some(Stage::Done(Finish::Suspended)) && released(&emu, &id)
    })
    .await;
    wait_until("the follower to see the first half", Some(&g), || {
        std::fs::read_to_string(&out_path)
            .unwrap_or_default()
            .contains("session sleep; exiting")
    })
    .await;
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follower stopped at the suspend:\n{}",
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );

    emu.resume(
        &id,
        Script {
            steps: vec![run("echo second")],
            then: Then::End,
        },
    )
    .unwrap();
    let (out, _) = follower_exit(&g, &mut follower, &out_path, &err_path).await;
    assert_eq!(
        stage(&g, &id),
        Some(Stage::Done(Finish::Terminated)),
        "{out}"
    );
    // Both halves: two remotes connected, one slept, one ended.
    assert_eq!(
        out.matches("devin-remote-sim: connected").count(),
        2,
        "{out}"
    );
    let slept = out.find("session sleep; exiting").expect("first half");
    let ended = out.find("session end; exiting").expect("second half");
    assert!(slept < ended, "{out}");
    assert!(out.contains("] done finish=terminated"), "{out}");
}

#[tokio::test]
async fn terminate_stops_the_sandbox_keeps_or_drops_the_snapshot_and_releases() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let home = dir.path();
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    // `drop` has a snapshot from an earlier suspend; `keep` has none yet.
    let drop = session(&emu, &outpost, vec![run("echo a")], Then::Sleep);
    let keep = session(&emu, &outpost, vec![run("echo b")], Then::Wait);
    wait_until("the suspend", Some(&g), || {
        stage(&g, &drop) == Some(Stage::Done(Finish::Suspended)) && released(&emu, &drop)
    })
    .await;
    assert_eq!(g.store().snapshots(&sid(&drop)).unwrap().len(), 1);
    emu.resume(
        &drop,
        Script {
            steps: vec![run("echo c")],
            then: Then::Wait,
        },
    )
    .unwrap();
    for id in [&drop, &keep] {
        wait_until("the remote to connect", Some(&g), || {
            stage(&g, id) == Some(Stage::Running) && view(&emu, id).connected
        })
        .await;
    }
    let admin = admin_url(&g).await;
    let state_arg = state.display().to_string();

    // Without the daemon's token (another user, a state directory it
    // cannot read) terminating is refused and says what would do.
    let out = cli(home, &["terminate", &drop, "--admin", &admin]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("terminating needs its admin token"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stage(&g, &drop), Some(Stage::Running));

    let out = ok(
        cli(
            home,
            &[
                "terminate",
                &drop,
                "--admin",
                &admin,
                "--state-dir",
                &state_arg,
            ],
        ),
        "terminate",
    );
    assert!(
        stdout(&out).contains("delete every snapshot"),
        "{}",
        stdout(&out)
    );
    let out = ok(
        cli(
            home,
            &[
                "terminate",
                &keep,
                "--keep-snapshot",
                "--admin",
                &admin,
                "--state-dir",
                &state_arg,
            ],
        ),
        "terminate --keep-snapshot",
    );
    assert!(
        stdout(&out).contains("keep the snapshot"),
        "{}",
        stdout(&out)
    );

    for (id, keep_snapshot) in [(&drop, false), (&keep, true)] {
        wait_until("the wind-down", Some(&g), || {
            stage(&g, id) == Some(Stage::Done(Finish::Stopped { keep_snapshot }))
                && released(&emu, id)
        })
        .await;
        let events = g.store().events(&sid(id), 0).unwrap();
        assert!(
            events.iter().any(|e| e.kind == "operator_terminate"),
            "{events:?}"
        );
        assert!(
            events.iter().any(|e| e.kind == "sandbox_destroyed"),
            "{events:?}"
        );
    }
    // What the log and the session events say is plain words and values:
    // no Rust `Debug` output (`Present(Running)`, `Stopped { .. }`), no
    // JSON objects for a finish, and no colour escapes in a log that is
    // a file.
    for (id, word) in [(&drop, "stopped"), (&keep, "stopped_keeping_snapshot")] {
        let events = g.store().events(&sid(id), 0).unwrap();
        let done = events
            .iter()
            .rev()
            .find(|e| e.kind == "done")
            .expect("done");
        assert_eq!(done.detail["finish"], word, "{events:?}");
        for e in &events {
            for value in e.detail.as_object().into_iter().flat_map(|m| m.values()) {
                let text = value.to_string();
                let debug = ["Present(", "Exited(", "Some(", "Stopped {", "NotStarted"];
                assert!(
                    !value.is_object() && !debug.iter().any(|d| text.contains(d)),
                    "{}: {text}",
                    e.kind
                );
            }
        }
    }
    // The store has the session done a moment before the log line saying
    // so is written (beside a CPU hog the test read the log in between).
    wait_until("the log to say the session is done", Some(&g), || {
        g.log().contains("finish=stopped_keeping_snapshot")
    })
    .await;
    let log = g.log();
    for debug in ["Present(", "Stopped {", "finish={", "\x1b["] {
        assert!(!log.contains(debug), "{debug:?} in the log:\n{log}");
    }
    assert!(g.store().snapshots(&sid(&drop)).unwrap().is_empty());
    let kept = g.store().snapshots(&sid(&keep)).unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].reason, SnapshotReason::Operator);
    assert_eq!(sandbox_dirs(&state), 0, "the sandboxes were destroyed");

    // Again: not active any more. Unknown: not found.
    let with_token = |id: &str| {
        cli(
            home,
            &[
                "terminate",
                id,
                "--admin",
                &admin,
                "--state-dir",
                &state_arg,
            ],
        )
    };
    let out = with_token(&drop);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not active"), "{}", stderr(&out));
    let out = with_token("devin-nope/../x");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no session"), "{}", stderr(&out));
    // Without the daemon there is nothing to ask.
    let out = cli(home, &["terminate", &keep, "--admin", DEAD_ADMIN]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("terminating needs the running `garrison serve`"),
        "{}",
        stderr(&out)
    );
}

/// More sessions than one page of the admin API holds: `garrison sessions
/// --all` pages through them all, each row once, newest claim first.
#[tokio::test]
async fn sessions_pages_through_more_than_one_page_of_the_admin_api() {
    const SEEDED: usize = orchestrator::MAX_LIMIT * 2 + 100;
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    {
        // Finished sessions as an older run left them, written through the
        // store's API before `garrison serve` opens it.
        let store = orchestrator::Store::open(&state.join("garrison.db")).unwrap();
        for i in 0..SEEDED {
            let mut rec = orchestrator::SessionRecord::new(
                &sid(&format!("seeded-{i:04}")),
                &outpost,
                "new".into(),
                "host",
                1_000_000 + i as i64,
            );
            rec.stage = Stage::Done(Finish::Terminated);
            store.put_session(&rec).unwrap();
        }
    }
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    let admin = admin_url(&g).await;
    let out = ok(
        cli(
            dir.path(),
            &["sessions", "--all", "--json", "--admin", &admin],
        ),
        "sessions --all --json",
    );
    assert!(!stderr(&out).contains("not reachable"), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    let want: Vec<String> = (0..SEEDED)
        .rev()
        .map(|i| format!("seeded-{i:04}"))
        .collect();
    assert_eq!(ids, want);
}
