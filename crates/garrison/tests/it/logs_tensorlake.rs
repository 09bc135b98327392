//! `garrison logs SESSION -f` for a session on Tensorlake: followed from
//! inside its sandbox over the PTY websocket, waiting (without waking it)
//! while the sandbox is suspended.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use sandbox::{ProcessSpec, Resources, Sandbox, SandboxName, SandboxSpec};
use tensorlake::{Secret, TensorlakeBackend, TensorlakeConfig};

const SESSION: &str = "devin-logs-pty-0001";

/// The `tick-N` numbers in `text`, in order.
fn ticks(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("tick-")?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_waits_across_a_suspend_without_waking_and_goes_on_after_the_resume() {
    let dir = tempfile::tempdir().unwrap();
    let world = TensorlakeWorld::for_state_dir(&dir.path().join("state"));
    let mock = world.mock();
    let backend = TensorlakeBackend::new(TensorlakeConfig {
        api_url: mock.url().to_owned(),
        sandbox_api_url: None,
        api_key: Secret::new(TENSORLAKE_KEY),
        default_image: None,
        timeout_secs: 1800,
        sandbox_root: mock.sandbox_root_template(),
        state_dir: dir.path().join("backend"),
        retry: Default::default(),
    })
    .unwrap();
    let handle = backend
        .create(&SandboxSpec {
            name: SandboxName::for_session(SESSION),
            labels: sandbox::session_labels(SESSION, "outpost_test"),
            image: None,
            restore_from: None,
            resources: Resources {
                cpus: 1.0,
                memory_mb: 512,
                disk_mb: 1024,
            },
            network: Default::default(),
        })
        .await
        .unwrap();
    backend
        .spawn(
            &handle,
            &ProcessSpec {
                name: "remote-1".into(),
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.1; done".into(),
                ],
                env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
                cwd: handle.workdir.clone(),
            },
        )
        .await
        .unwrap();

    // No daemon and no state here: the session is followed in its sandbox.
    let mut env = world.env();
    env.extend([
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), dir.path().display().to_string()),
        (
            "GARRISON_CONFIG".to_owned(),
            dir.path().join("no-config").display().to_string(),
        ),
    ]);
    let mut follower = tokio::process::Command::new(garrison_bin())
        .args([
            "logs",
            SESSION,
            "-f",
            "--admin",
            "http://127.0.0.1:9",
            "--state-dir",
        ])
        .arg(dir.path().join("nothing"))
        .env_clear()
        .envs(env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = seen.clone();
    let mut stdout = follower.stdout.take().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
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
    wait_until("the follower prints the output", None, || {
        ticks(&seen.lock().unwrap()).contains(&5)
    })
    .await;

    backend.suspend(&handle).await.unwrap();
    assert_eq!(mock.status(&handle.id).as_deref(), Some("suspended"));
    // Asleep: the follower waits and wakes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(mock.status(&handle.id).as_deref(), Some("suspended"));
    assert_eq!(
        mock.requests(&format!("/sandboxes/{}/resume", handle.id)),
        0,
        "nothing resumed the sandbox"
    );
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follower gave up"
    );
    let before = *ticks(&seen.lock().unwrap()).last().unwrap();

    // Resumed (as Garrison does when Devin wakes the session): it goes on.
    backend.resume(&handle).await.unwrap();
    wait_until(
        "the follower prints what comes after the resume",
        None,
        || {
            ticks(&seen.lock().unwrap())
                .last()
                .is_some_and(|last| *last >= before + 5)
        },
    )
    .await;
    let all = ticks(&seen.lock().unwrap());
    let expected: Vec<u64> = (0..all.len() as u64).collect();
    assert_eq!(
        all, expected,
        "every line once, in order, across the re-attach"
    );

    // The session ends: its sandbox is deleted, and the follower stops.
    backend.destroy(&handle).await.unwrap();
    let status = tokio::time::timeout(HANG_GUARD, follower.wait())
        .await
        .expect("the follower stops once the sandbox is gone")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_a_served_tensorlake_session_in_its_sandbox_across_suspend_and_resume() {
    use emulator::{Script, Then};
    use orchestrator::{Finish, Stage};

    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
        Backend::Tensorlake,
    );
    let stage = |id: &str| g.store().session(&sid(id)).ok().flatten().map(|s| s.stage);
    // The first half waits for the follower to be attached: the output of
    // a sandbox that is already suspended cannot be read without waking it.
    let go = dir.path().join("go");
    let id = session(
        &emu,
        &outpost,
        vec![
            run("echo first"),
            run(&format!(
                "while [ ! -e {} ]; do sleep 0.1; done",
                go.display()
            )),
        ],
        Then::Sleep,
    );
    wait_until("the claim", Some(&g), || stage(&id).is_some()).await;
    let admin = admin_url(&g).await;

    let world = g.tensorlake.clone().unwrap();
    let out_path = dir.path().join("follow.out");
    let err_path = dir.path().join("follow.err");
    let mut follower = std::process::Command::new(garrison_bin())
        .args(["logs", "-f", &id, "--admin", &admin])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("GARRISON_CONFIG", dir.path().join("no-config"))
        .envs(world.env())
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();

    wait_until("the follower to attach", Some(&g), || {
        std::fs::read_to_string(&out_path)
            .unwrap_or_default()
            .contains("devin-remote-sim: connected")
    })
    .await;
    std::fs::write(&go, b"").unwrap();

    wait_until("the suspend", Some(&g), || {
        stage(&id) == Some(Stage::Done(Finish::Suspended)) && released(&emu, &id)
    })
    .await;
    // The first half's last lines may reach the follower only after the
    // resume: the PTY stops with the sandbox. They are checked at the end.
    wait_until(
        "the follower to wait for the suspended sandbox",
        Some(&g),
        || {
            std::fs::read_to_string(&err_path)
                .unwrap_or_default()
                .contains("following does not wake it")
        },
    )
    .await;
    assert!(
        follower.try_wait().unwrap().is_none(),
        "the follower stopped at the suspend:\n{}",
        std::fs::read_to_string(&err_path).unwrap_or_default()
    );

    // The second half, too, waits for the follower to attach again before
    // the session ends and its sandbox (with its output) is deleted.
    let go_again = dir.path().join("go-again");
    emu.resume(
        &id,
        Script {
            steps: vec![
                run("echo second"),
                run(&format!(
                    "while [ ! -e {} ]; do sleep 0.1; done",
                    go_again.display()
                )),
            ],
            then: Then::End,
        },
    )
    .unwrap();
    wait_until("the follower to attach again", Some(&g), || {
        std::fs::read_to_string(&out_path)
            .unwrap_or_default()
            .matches("devin-remote-sim: connected")
            .count()
            == 2
    })
    .await;
    std::fs::write(&go_again, b"").unwrap();
    let (out, err) = follower_exit(&g, &mut follower, &out_path, &err_path).await;
    // Both remotes' output, each once, in order, read from the sandbox.
    assert_eq!(
        out.matches("devin-remote-sim: connected").count(),
        2,
        "{out}\n{err}"
    );
    assert_eq!(out.matches("session sleep; exiting").count(), 1, "{out}");
    let slept = out.find("session sleep; exiting").expect("first half");
    let ended = out.find("session end; exiting").expect("second half");
    assert!(slept < ended, "{out}");
}
