//! `garrison serve` end to end: the real binary, the emulator, the remote
//! simulator and the host backend. Every check reads the emulator's
//! transcript, which is what Devin would see.

use std::time::Duration;

use crate::common::Backend;
use crate::common::*;
use emulator::{Faults, NewSession, Script, Step, Then};
use fleet::SessionStatus;
use orchestrator::{Finish, Stage};

fn opts<'a>(outpost: &'a str, state: &'a std::path::Path) -> GarrisonOptions<'a> {
    GarrisonOptions {
        outpost,
        state_dir: state,
        extra_args: vec![],
    }
}

async fn a_new_session_runs_its_steps_terminates_and_is_cleaned_up(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(&emu, opts(&outpost, &state), backend);

    let id = session(
        &emu,
        &outpost,
        vec![run("echo built > out.txt && cat out.txt"), run("pwd")],
        Then::End,
    );
    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;

    let v = view(&emu, &id);
    assert_eq!(v.connections, 1, "exactly one remote connected");
    assert_eq!(v.events("duplicate_connection").count(), 0);
    let outputs = step_outputs(&emu, &id);
    assert_eq!(outputs[0].trim(), "built");
    // The sandbox goes first, then the runner records the end.
    wait_until(
        "sandbox directory removed and the end recorded",
        Some(&g),
        || {
            sandbox_dirs(&state) == 0
                && g.store()
                    .session(&sid(&id))
                    .unwrap()
                    .expect("recorded")
                    .stage
                    == Stage::Done(Finish::Terminated)
        },
    )
    .await;
    // The remote's output and Garrison's events are in the session log.
    let events = std::fs::read_to_string(
        state
            .join("sessions")
            .join(sandbox::hashed_id(&id))
            .join("events.log"),
    )
    .unwrap();
    assert!(
        events.contains("remote_started") && events.contains("\"done\""),
        "{events}"
    );
    assert!(
        !g.log().contains(&emu.account_token()),
        "the account token leaked into the log"
    );
}

/// The spawn contract's machine variables are the sandbox's, not
/// Garrison's: `USER`/`LOGNAME` name the user the remote runs as (the test
/// harness starts Garrison with `USER=garrison-test`, which must not leak
/// through), and `DEVIN_CHROME_PATH` names a browser in the sandbox when it
/// has one (on `host`, the machine's Chromium, which the simulator checks is
/// executable before it connects).
async fn the_remote_gets_the_sandboxes_user_and_browser(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(&emu, opts(&outpost, &state), backend);

    let id = session(&emu, &outpost, vec![run("env")], Then::End);
    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;

    let outputs = step_outputs(&emu, &id);
    let env: std::collections::BTreeMap<&str, &str> = outputs[0]
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    let user = match backend {
        // Processes on `host` run as Garrison's own user.
        Backend::Host => {
            let out = std::process::Command::new("id")
                .arg("-un")
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        }
        Backend::Local | Backend::LocalRunsc | Backend::Tensorlake | Backend::Modal => {
            "root".to_owned()
        }
    };
    assert_eq!(env.get("USER"), Some(&user.as_str()), "{env:?}");
    assert_eq!(env.get("LOGNAME"), Some(&user.as_str()), "{env:?}");
    let chromium = "/usr/bin/chromium";
    let chrome = match backend {
        Backend::Host if std::path::Path::new(chromium).exists() => Some(chromium),
        // The default test image has no browser; the clouds' mocks neither.
        _ => None,
    };
    assert_eq!(env.get("DEVIN_CHROME_PATH").copied(), chrome, "{env:?}");
    assert!(!env.contains_key("DEVIN_OUTPOST_DESKTOP"), "{env:?}");
    assert!(!env.contains_key("DISPLAY"), "{env:?}");
}

async fn a_suspended_session_resumes_with_its_files(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(&emu, opts(&outpost, &state), backend);

    let id = session(
        &emu,
        &outpost,
        vec![
            write("notes/plan.md", "step one"),
            run("mkdir -p repo && echo v1 > repo/code.txt && rm -f notes/gone"),
        ],
        Then::Sleep,
    );
    wait_until("suspended and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    // Where suspending keeps memory, the suspended sandbox is kept too.
    let kept = usize::from(backend == Backend::Tensorlake);
    wait_until(
        "sandbox destroyed (or suspended) after snapshot",
        Some(&g),
        || sandbox_dirs(&state) == kept,
    )
    .await;
    assert_eq!(
        g.store().snapshots(&sid(&id)).unwrap().len(),
        1,
        "one suspend snapshot recorded"
    );

    emu.resume(
        &id,
        Script {
            steps: vec![run("cat notes/plan.md repo/code.txt")],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed session terminated", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    let outputs = step_outputs(&emu, &id);
    assert_eq!(
        outputs.last().unwrap(),
        "step onev1\n",
        "files restored: {outputs:?}"
    );
    assert_eq!(view(&emu, &id).connections, 2, "one remote per claim");
    // Terminated: the snapshots are deleted.
    wait_until("snapshots deleted", Some(&g), || {
        g.store().snapshots(&sid(&id)).unwrap().is_empty()
    })
    .await;
    wait_until("sandbox destroyed", Some(&g), || sandbox_dirs(&state) == 0).await;
}

/// On Tensorlake a sleeping session's sandbox is suspended, memory and
/// all, and its resume claim resumes that same sandbox: a process started
/// before the sleep is still alive after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensorlake_suspends_the_sandbox_and_resumes_it_with_its_processes() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(&emu, opts(&outpost, &state), Backend::Tensorlake);
    let id = session(
        &emu,
        &outpost,
        vec![run(
            "(sh -c 'echo $$ > bg.pid; exec sleep 1000') >/dev/null 2>&1 & sleep 0.2; echo started",
        )],
        Then::Sleep,
    );
    wait_until("suspended and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    let world = g.tensorlake.clone().expect("the mock");
    let sandbox_id = world.sandbox_dirs()[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    wait_until("the sandbox suspended", Some(&g), || {
        world.mock().status(&sandbox_id).as_deref() == Some("suspended")
    })
    .await;

    emu.resume(
        &id,
        Script {
            steps: vec![run("kill -0 $(cat bg.pid) && echo alive || echo dead")],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed session terminated", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    assert_eq!(step_outputs(&emu, &id).last().unwrap().trim(), "alive");
    let events = std::fs::read_to_string(
        state
            .join("sessions")
            .join(sandbox::hashed_id(&id))
            .join("events.log"),
    )
    .unwrap();
    assert!(
        events.contains("sandbox_suspended") && events.contains("sandbox_resumed"),
        "{events}"
    );
    wait_until("sandbox deleted", Some(&g), || sandbox_dirs(&state) == 0).await;
}

/// On Modal a sleeping session's sandbox goes into a memory snapshot and
/// ends; its resume claim restores the snapshot: a process started before
/// the sleep, one that left its exec's process group and parentage, is the
/// same process and running (not stopped, not a zombie) after the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modal_suspends_into_a_memory_snapshot_and_resumes_with_its_processes() {
    modal_resumes_with_its_processes(false).await;
}

/// As above, with Garrison restarted while the session sleeps: the sleeping
/// session is found again and resumed with its memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modal_resumes_with_its_processes_after_a_garrison_restart() {
    modal_resumes_with_its_processes(true).await;
}

async fn modal_resumes_with_its_processes(restart_while_asleep: bool) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = Garrison::start_on(&emu, opts(&outpost, &state), Backend::Modal);
    let id = session(
        &emu,
        &outpost,
        vec![run(
            "setsid sh -c 'echo $$ > bg.pid; exec sleep 1000' >/dev/null 2>&1 </dev/null & \
             while [ ! -s bg.pid ]; do sleep 0.05; done; cat bg.pid",
        )],
        Then::Sleep,
    );
    wait_until("suspended and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Suspended) && released(&emu, &id)
    })
    .await;
    let mock = g.modal.clone().expect("the mock");
    wait_until("the sandbox ended in its memory snapshot", Some(&g), || {
        let all = mock.sandboxes();
        !all.is_empty() && all.iter().all(|s| !s.running)
    })
    .await;
    assert_eq!(mock.calls("TaskSnapshotMemory"), 1, "{}", g.log());
    let pid: u32 = step_outputs(&emu, &id)[0].trim().parse().unwrap();
    if restart_while_asleep {
        g.crash_and_restart();
    }

    emu.resume(
        &id,
        Script {
            steps: vec![run(
                "p=$(cat bg.pid); echo \"$p $(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f1)\"",
            )],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("resumed session terminated", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    let last = step_outputs(&emu, &id).last().unwrap().clone();
    let (same_pid, process_state) = last.trim().split_once(' ').expect("pid and state");
    assert_eq!(same_pid, pid.to_string(), "{}", g.log());
    assert!(
        matches!(process_state, "R" | "S" | "D"),
        "process {pid} is {process_state:?} after the resume"
    );
    assert_eq!(mock.calls("SandboxRestoreV2"), 1, "{}", g.log());
    let restored = mock
        .sandboxes()
        .into_iter()
        .filter(|s| s.restored_from.is_some())
        .count();
    assert_eq!(restored, 1);
    let events = std::fs::read_to_string(
        state
            .join("sessions")
            .join(sandbox::hashed_id(&id))
            .join("events.log"),
    )
    .unwrap();
    assert!(
        events.contains("sandbox_suspended") && events.contains("sandbox_resumed"),
        "{events}"
    );
    wait_until("every sandbox ended", Some(&g), || {
        mock.sandboxes().iter().all(|s| !s.running) && sandbox_dirs(&state) == 0
    })
    .await;
}

/// Under capacity pressure Tensorlake's create answers 504 `timeout` with
/// the sandbox left queued: Garrison waits for that sandbox and serves the
/// session in it, never creating again (which would meet the name) nor
/// deleting the queued one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensorlake_waits_for_a_sandbox_queued_for_capacity() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(&emu, opts(&outpost, &state), Backend::Tensorlake);
    let world = g.tensorlake.clone().expect("the mock");
    world
        .mock()
        .next_create(tensorlake_mock::CreateOutcome::Timeout { pending_ms: 1500 });
    let id = session(&emu, &outpost, vec![run("echo served")], Then::End);
    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    assert_eq!(step_outputs(&emu, &id)[0].trim(), "served");
    assert_eq!(
        world.mock().requests_exact("POST", "/sandboxes"),
        1,
        "one create, waited for"
    );
    wait_until("sandbox deleted", Some(&g), || sandbox_dirs(&state) == 0).await;
}

async fn two_garrisons_serve_twenty_sessions_exactly_once(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let (state_a, state_b) = (dir.path().join("a"), dir.path().join("b"));
    let a = Garrison::start_on(&emu, opts(&outpost, &state_a), backend);
    let b = Garrison::start_on(&emu, opts(&outpost, &state_b), backend);

    let ids: Vec<String> = (0..20)
        .map(|i| {
            session(
                &emu,
                &outpost,
                vec![run(&format!("echo session-{i}"))],
                Then::End,
            )
        })
        .collect();
    wait_until("all twenty terminated and released", Some(&a), || {
        ids.iter()
            .all(|id| status_is(&emu, id, SessionStatus::Terminated) && released(&emu, id))
    })
    .await;
    for (i, id) in ids.iter().enumerate() {
        let v = view(&emu, id);
        assert_eq!(v.connections, 1, "{id} connected {} times", v.connections);
        assert_eq!(v.events("duplicate_connection").count(), 0);
        assert_eq!(v.events("step").count(), 1);
        assert_eq!(step_outputs(&emu, id)[0].trim(), format!("session-{i}"));
    }
    // Both served, and each session is recorded as served by exactly one.
    // A Garrison records a session as done only after releasing its claim,
    // so the emulator can see the release first.
    let served = |g: &Garrison| {
        g.store()
            .sessions()
            .unwrap()
            .into_iter()
            .filter(|s| s.stage == Stage::Done(Finish::Terminated))
            .map(|s| s.session_id)
            .collect::<std::collections::BTreeSet<_>>()
    };
    wait_until("both stores record every session as done", Some(&a), || {
        let (sa, sb) = (served(&a), served(&b));
        ids.iter()
            .all(|id| sa.contains(id.as_str()) || sb.contains(id.as_str()))
    })
    .await;
    let (sa, sb) = (served(&a), served(&b));
    assert_eq!(sa.len() + sb.len(), 20, "a={} b={}", sa.len(), sb.len());
    assert!(sa.is_disjoint(&sb));
}

async fn a_checksum_mismatch_is_refused_and_the_claim_released(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(&emu, opts(&outpost, &state), backend);

    let bad_sha = emu.add_corrupt_remote();
    let id = emu
        .create_session(NewSession {
            outpost_id: outpost.clone(),
            remote_binary_sha: Some(bad_sha.clone()),
            script: Script {
                steps: vec![run("echo never")],
                then: Then::End,
            },
            ..Default::default()
        })
        .unwrap();
    wait_until("claimed then released", Some(&g), || released(&emu, &id)).await;
    wait_until("refusal recorded", Some(&g), || {
        g.store()
            .session(&sid(&id))
            .unwrap()
            .is_some_and(|s| s.stage == Stage::Done(Finish::Released))
    })
    .await;
    assert_eq!(
        view(&emu, &id).connections,
        0,
        "the corrupt binary never ran"
    );
    let rec = g.store().session(&sid(&id)).unwrap().unwrap();
    assert!(
        rec.error
            .unwrap_or_default()
            .contains("failed verification")
    );
    assert!(
        g.log().contains("failed verification"),
        "the refusal is logged"
    );
    assert_eq!(sandbox_dirs(&state), 0, "no sandbox was created");
}

async fn a_crashing_remote_is_restarted_then_given_up_on(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--max-restarts".into(), "2".into()],
        },
        backend,
    );

    let id = session(
        &emu,
        &outpost,
        vec![Step::Crash {
            code: 3,
            times: 1000,
        }],
        Then::End,
    );
    wait_until("given up", Some(&g), || {
        g.store()
            .session(&sid(&id))
            .unwrap()
            .is_some_and(|s| s.stage == Stage::Done(Finish::Failed))
    })
    .await;
    let rec = g.store().session(&sid(&id)).unwrap().unwrap();
    assert_eq!(rec.restarts, 2);
    assert_eq!(
        view(&emu, &id).connections,
        3,
        "first start and two restarts"
    );
    let snapshots = g.store().snapshots(&sid(&id)).unwrap();
    assert_eq!(snapshots.len(), 1, "a recovery snapshot is kept");
    assert_eq!(snapshots[0].reason, orchestrator::SnapshotReason::Recovery);
    wait_until("claim released", Some(&g), || released(&emu, &id)).await;
}

async fn every_session_is_served_under_the_fault_profile(backend: Backend) {
    let emu = emulator_with(|c| {
        c.faults = Faults {
            error_rate: 0.1,
            lost_answer_rate: 0.0,
            latency_ms: 20,
            cut_watch_every_secs: Some(1),
            withhold_events: false,
            transient_suspended_rate: 0.2,
            duplicate_event_rate: 0.2,
            null_platform: true,
            // As the reference server answers claims, and then some.
            claim_deadline_missing_rate: 0.2,
            whole_second_timestamps: true,
            // As Cognition's model of the server: no event for a release.
            silent_release: true,
        };
    })
    .await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--relist-interval-secs".into(), "1".into()],
        },
        backend,
    );
    let ids: Vec<String> = (0..6)
        .map(|i| session(&emu, &outpost, vec![run(&format!("echo f{i}"))], Then::End))
        .collect();
    wait_until("all served under faults", Some(&g), || {
        ids.iter().all(|id| {
            let v = view(&emu, id);
            v.events("step").count() == 1 && v.session_status == SessionStatus::Terminated
        })
    })
    .await;
    // Withheld events: only the periodic re-list can find new work now.
    emu.set_faults(Faults {
        withhold_events: true,
        ..emu.faults()
    });
    let late = session(&emu, &outpost, vec![run("echo late")], Then::End);
    wait_until("served with a silent watch", Some(&g), || {
        view(&emu, &late).events("step").count() == 1
    })
    .await;
    for id in ids.iter().chain([&late]) {
        let v = view(&emu, id);
        assert_eq!(
            v.connections,
            1,
            "{id} served more than once\n--- transcript ---\n{:#?}\n--- garrison log ---\n{}",
            v.transcript,
            g.log()
        );
    }
}

/// `kill -9` of Garrison at several points of a session's life; after a
/// restart the session is still served exactly once with its files.
async fn kill_9_at_any_point_still_serves_exactly_once(backend: Backend) {
    let emu = emulator_with(|c| c.status_lag = Duration::from_millis(1500)).await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut g = Garrison::start_on(&emu, opts(&outpost, &state), backend);

    // The session waits for a file it is given later, so kills land while
    // it runs.
    let id = session(
        &emu,
        &outpost,
        vec![
            write("work/a.txt", "alpha"),
            run("for i in $(seq 1 400); do [ -e go ] && break; sleep 0.05; done; cat work/a.txt"),
            run("echo beta >> work/a.txt && cat work/a.txt"),
        ],
        Then::End,
    );

    // 1. Right after the claim.
    wait_until("claimed", Some(&g), || {
        view(&emu, &id).events("claimed").count() == 1
    })
    .await;
    g.crash_and_restart();
    // 2. While the remote runs.
    wait_until("connected", Some(&g), || view(&emu, &id).connected).await;
    g.crash_and_restart();
    wait_until("first step done", Some(&g), || {
        view(&emu, &id).steps_done >= 1
    })
    .await;
    g.crash_and_restart();
    let workdir = only_workdir(&state);
    write_as_workspace_owner(&workdir, "go", b"");
    // 3. After the remote exited, while the final status lags.
    wait_until("remote disconnected", Some(&g), || {
        let v = view(&emu, &id);
        v.steps_done == 3 && !v.connected
    })
    .await;
    g.crash_and_restart();

    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;
    let v = view(&emu, &id);
    assert_eq!(v.connections, 1, "a second remote ran: {:?}", v.transcript);
    assert_eq!(
        step_outputs(&emu, &id)[1..],
        ["alpha".to_owned(), "alphabeta\n".to_owned()]
    );
    wait_until("cleaned up", Some(&g), || sandbox_dirs(&state) == 0).await;
}

/// Every test above, once per backend; `local` (runc and runsc) runs where
/// the machine allows.
macro_rules! on_each_backend {
    ($($test:ident),+ $(,)?) => {
        mod host {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Backend::Host).await
                }
            )+
        }
        mod local {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if super::Backend::Local.available() {
                        super::$test(super::Backend::Local).await
                    }
                }
            )+
        }
        /// The same on gVisor (`SANDBOX_RUNTIME=runsc`).
        mod local_runsc {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if super::Backend::LocalRunsc.available() {
                        super::$test(super::Backend::LocalRunsc).await
                    }
                }
            )+
        }
        mod tensorlake {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Backend::Tensorlake).await
                }
            )+
        }
        mod modal {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Backend::Modal).await
                }
            )+
        }
    };
}

on_each_backend!(
    a_new_session_runs_its_steps_terminates_and_is_cleaned_up,
    the_remote_gets_the_sandboxes_user_and_browser,
    a_suspended_session_resumes_with_its_files,
    two_garrisons_serve_twenty_sessions_exactly_once,
    a_checksum_mismatch_is_refused_and_the_claim_released,
    a_crashing_remote_is_restarted_then_given_up_on,
    every_session_is_served_under_the_fault_profile,
    kill_9_at_any_point_still_serves_exactly_once,
);
