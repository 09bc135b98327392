//! `garrison serve` around the edges of a session's life: graceful stop,
//! drain, resume by another Garrison, a lost snapshot, several outposts in
//! one process, and secrets kept out of everything written.

use std::time::Duration;

use crate::common::*;
use emulator::{Script, Then};
use fleet::SessionStatus;
use orchestrator::{Finish, Stage};

fn sigterm(g: &Garrison) {
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(g.child.id() as i32, libc::SIGTERM);
    }
}

async fn wait_exit(g: &mut Garrison) -> std::process::ExitStatus {
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

fn stage(g: &Garrison, id: &str) -> Option<Stage> {
    g.store().session(&sid(id)).unwrap().map(|s| s.stage)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_running_sessions_alone_and_a_restart_adopts_them() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );

    let id = session(
        &emu,
        &outpost,
        vec![write("kept.txt", "still here")],
        Then::Wait,
    );
    wait_until("running", Some(&g), || view(&emu, &id).steps_done == 1).await;
    sigterm(&g);
    assert!(
        wait_exit(&mut g).await.success(),
        "graceful stop exits 0\n{}",
        g.log()
    );
    // The remote is untouched: still connected, the claim still ours.
    assert!(
        view(&emu, &id).connected,
        "the remote was stopped by a graceful stop"
    );
    assert_eq!(stage(&g, &id), Some(Stage::Running));

    g.crash_and_restart();
    emu.terminate(&id).unwrap();
    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    assert_eq!(
        view(&emu, &id).connections,
        1,
        "the restarted Garrison re-adopted the same remote"
    );
    // The store records the session as done just after the release.
    wait_until("recorded as terminated", Some(&g), || {
        stage(&g, &id) == Some(Stage::Done(Finish::Terminated))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_waits_for_running_sessions_to_end() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--drain".into()],
        },
    );
    let id = session(&emu, &outpost, vec![run("true")], Then::Wait);
    wait_until("running", Some(&g), || view(&emu, &id).steps_done == 1).await;
    sigterm(&g);
    // The signal is handled asynchronously: a session queued before the
    // claim loop stopped could rightly still be claimed.
    wait_until("claiming stopped", Some(&g), || {
        g.log().contains("stopped claiming")
    })
    .await;
    // No new claims while draining.
    let late = session(&emu, &outpost, vec![run("true")], Then::End);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        g.child.try_wait().unwrap().is_none(),
        "drain exited with a session running"
    );
    assert_eq!(
        view(&emu, &late).events("claimed").count(),
        0,
        "claimed while draining"
    );

    emu.terminate(&id).unwrap();
    assert!(wait_exit(&mut g).await.success(), "{}", g.log());
    assert!(released(&emu, &id));
    assert_eq!(stage(&g, &id), Some(Stage::Done(Finish::Terminated)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_garrison_sharing_the_snapshot_store_resumes_the_session() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("snapshots");
    let with_shared = || vec!["--snapshot-dir".to_owned(), shared.display().to_string()];
    let (state_a, state_b) = (dir.path().join("a"), dir.path().join("b"));

    let a = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state_a,
            extra_args: with_shared(),
        },
    );
    let id = session(
        &emu,
        &outpost,
        vec![write("handoff.txt", "from a")],
        Then::Sleep,
    );
    wait_until("suspended and released", Some(&a), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    drop(a);

    let b = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state_b,
            extra_args: with_shared(),
        },
    );
    emu.resume(
        &id,
        Script {
            steps: vec![run("cat handoff.txt")],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed and terminated", Some(&b), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    assert_eq!(step_outputs(&emu, &id).last().unwrap(), "from a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_snapshot_falls_back_to_a_fresh_sandbox() {
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
    let id = session(&emu, &outpost, vec![write("lost.txt", "x")], Then::Sleep);
    wait_until("suspended and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    // The snapshot store loses the archive (disk failure, manual clean-up).
    for entry in std::fs::read_dir(state.join("snapshots").join("host"))
        .unwrap()
        .flatten()
    {
        std::fs::remove_file(entry.path()).unwrap();
    }
    emu.resume(
        &id,
        Script {
            steps: vec![run("ls lost.txt 2>&1; echo fresh")],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed and terminated", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    assert!(step_outputs(&emu, &id).last().unwrap().contains("fresh"));
    let events = g.store().events(&sid(&id), 0).unwrap();
    assert!(
        events.iter().any(|e| e.kind == "snapshot_missing"),
        "the fallback is recorded"
    );
    assert!(
        g.log().contains("no snapshot to resume from"),
        "and warned about"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_serves_several_outposts_from_a_config_file() {
    let emu = emulator().await;
    let (first, second) = (outpost(&emu), outpost(&emu));
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("garrison.toml");
    std::fs::write(
        &config,
        format!(
            "api_url = \"{}\"\nstatic_base_url = \"{}\"\nbackend = \"host\"\n\n\
             [[outpost]]\nid = \"{first}\"\nmax_concurrent = 1\n\n[[outpost]]\nid = \"{second}\"\nmax_concurrent = 2\n",
            emu.base_url(),
            emu.static_base_url()
        ),
    )
    .unwrap();
    let g = Garrison::start_with_args(
        &emu,
        &state,
        vec![
            "serve".into(),
            "--config".into(),
            config.display().to_string(),
            "--state-dir".into(),
            state.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
    );
    let a = session(&emu, &first, vec![run("echo one")], Then::End);
    let b = session(&emu, &second, vec![run("echo two")], Then::End);
    wait_until("both outposts served", Some(&g), || {
        [&a, &b]
            .iter()
            .all(|id| status_is(&emu, id, SessionStatus::Terminated) && released(&emu, id))
    })
    .await;
    assert_eq!(step_outputs(&emu, &a), ["one\n"]);
    assert_eq!(step_outputs(&emu, &b), ["two\n"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_setting_fails_at_start_naming_it() {
    let emu = emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: "o",
            state_dir: &state,
            extra_args: vec!["--max-concurrent".into(), "zero".into()],
        },
    );
    let status = wait_exit(&mut g).await;
    assert!(!status.success());
    assert!(
        g.log().contains("max-concurrent") || g.log().contains("MAX_CONCURRENT_SESSIONS"),
        "{}",
        g.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_logs_state_or_the_sandbox() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--log-format".into(), "json".into()],
        },
    );
    // The session prints its whole environment and looks for the account
    // token everywhere it can read.
    let id = session(
        &emu,
        &outpost,
        vec![
            run("env; cat /proc/self/environ | tr '\\0' '\\n'"),
            write("x", "y"),
        ],
        Then::Sleep,
    );
    wait_until("suspended and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    let token = emu.account_token();
    let env_dump = &step_outputs(&emu, &id)[0];
    assert!(
        !env_dump.contains(&token),
        "the account token reached the sandbox"
    );
    assert!(!env_dump.contains("DEVIN_OUTPOSTS_TOKEN"));
    let hits = grep_tree(&state, token.as_bytes());
    assert!(hits.is_empty(), "the account token was written to {hits:?}");
    assert!(!g.log().contains(&token));
    // JSON logs: every line parses.
    for line in g.log().lines().filter(|l| !l.is_empty()) {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON: {line}"
        );
    }
    // State and logs are private.
    use std::os::unix::fs::PermissionsExt;
    let db_mode = std::fs::metadata(state.join("garrison.db"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(db_mode, 0o600);
}

/// An upgrade as systemd performs one: `serve` is stopped with SIGTERM while
/// a session runs and another sleeps, its store is left as the releases
/// before schema versions left it, and the (new) binary starts on it. The
/// store is migrated, the running session is re-adopted (its one remote
/// keeps its workspace), the sleeping one resumes with its files, and
/// neither is started twice.
async fn an_upgrade_keeps_running_and_sleeping_sessions(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = Garrison::start_on(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
        backend,
    );
    let running = session(
        &emu,
        &outpost,
        vec![write("kept.txt", "running before")],
        Then::Wait,
    );
    let asleep = session(
        &emu,
        &outpost,
        vec![write("notes.txt", "asleep before")],
        Then::Sleep,
    );
    wait_until("one running, one asleep", Some(&g), || {
        view(&emu, &running).steps_done == 1
            && status_is(&emu, &asleep, SessionStatus::Suspended)
            && released(&emu, &asleep)
    })
    .await;
    sigterm(&g);
    assert!(wait_exit(&mut g).await.success(), "{}", g.log());

    let db = state.join("garrison.db");
    let schema_version = || -> u32 {
        rusqlite::Connection::open(&db)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    let newest = schema_version();
    assert!(newest >= 1, "a new store records its schema version");
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", 0)
        .unwrap();

    g.crash_and_restart();
    wait_until("the store migrated", Some(&g), || {
        schema_version() == newest
    })
    .await;
    emu.resume(
        &asleep,
        Script {
            steps: vec![run("cat notes.txt")],
            then: Then::End,
        },
    )
    .unwrap();
    emu.terminate(&running).unwrap();
    wait_until("both ended and released", Some(&g), || {
        [&running, &asleep]
            .iter()
            .all(|id| status_is(&emu, id, SessionStatus::Terminated) && released(&emu, id))
    })
    .await;
    assert_eq!(
        view(&emu, &running).connections,
        1,
        "the running session's remote was re-adopted, not started again"
    );
    assert_eq!(view(&emu, &asleep).connections, 2, "one remote per claim");
    let outputs = step_outputs(&emu, &asleep);
    assert_eq!(outputs.last().map(String::as_str), Some("asleep before"));
    assert!(
        !g.log().contains("panicked"),
        "the restarted garrison panicked\n{}",
        g.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_keeps_running_and_sleeping_sessions_on_host() {
    an_upgrade_keeps_running_and_sleeping_sessions(Backend::Host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_keeps_running_and_sleeping_sessions_on_local() {
    if Backend::Local.available() {
        an_upgrade_keeps_running_and_sleeping_sessions(Backend::Local).await;
    }
}

/// Each end of a session gives its claim back once. The runner's release
/// is the last word: the claim loop, whose view of the queue may still show
/// the claim, must not send a second one, which the fleet API refuses (409,
/// not the holder). Whether the session ended or went to sleep, and on a
/// server that, as Cognition's model of it, sends no watch event for a
/// release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_gives_its_claim_back_once_per_end() {
    let emu = emulator_with(|c| c.faults.silent_release = true).await;
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
    let ended = session(&emu, &outpost, vec![run("true")], Then::End);
    let asleep = session(&emu, &outpost, vec![run("true")], Then::Sleep);
    wait_until("one ended, one asleep, both released", Some(&g), || {
        status_is(&emu, &ended, SessionStatus::Terminated)
            && status_is(&emu, &asleep, SessionStatus::Suspended)
            && released(&emu, &ended)
            && released(&emu, &asleep)
    })
    .await;
    // A second release would follow within a claim round or two (rounds
    // run on every queue change and every few hundred milliseconds).
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in [&ended, &asleep] {
        let v = view(&emu, id);
        assert_eq!(
            v.events("release_refused").count(),
            0,
            "{id}: a release after the claim was given back\n{}",
            g.log()
        );
        assert_eq!(v.events("released").count(), 1, "{id}");
    }
}
