//! End to end with the real `devin-remote-sim` binary, when one is built
//! (`cargo build -p remote-sim`); skipped otherwise, since it belongs to
//! another crate. Proves the gateway and the simulator speak the same
//! protocol and that the exit codes follow the brain's commands.

use std::time::Duration;

use emulator::{Emulator, EmulatorConfig, NewSession, Script, Step, Then};
use fleet::{Platform, SessionStatus};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);

async fn claim(emu: &Emulator, id: &str) -> Value {
    reqwest::Client::new()
        .post(format!(
            "{}/opbeta/outposts/devins/{id}/claim",
            emu.base_url()
        ))
        .bearer_auth(emu.account_token())
        .json(&json!({"acceptor_id": "e2e"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn run_remote(binary: &std::path::Path, claim: &Value, session_id: &str) -> Option<i32> {
    let dir =
        std::env::temp_dir().join(format!("emulator-e2e-{}-{session_id}", std::process::id()));
    let work = dir.join("work");
    let state = dir.join("state");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let mut child = tokio::process::Command::new(binary)
        .arg("serve")
        .current_dir(&work)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(
            "DEVIN_OUTPOST_GATEWAY_URL",
            claim["status"]["gateway_url"].as_str().unwrap(),
        )
        .env(
            "DEVIN_OUTPOST_CONNECT_TOKEN",
            claim["status"]["connect_token"].as_str().unwrap(),
        )
        .env("DEVIN_OUTPOST_SESSION_ID", session_id)
        .env("DEVIN_REMOTE_STATE_DIR", &state)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("remote exits")
        .unwrap();
    let written = std::fs::read_to_string(work.join("out/notes.txt")).ok();
    let _ = std::fs::remove_dir_all(&dir);
    if written.is_some() {
        assert_eq!(written.as_deref(), Some("hello"));
    }
    status.code()
}

#[tokio::test]
async fn the_simulator_runs_a_script_crashes_on_cue_and_exits_zero_at_the_end() {
    let Some(binary) = emulator::locate_remote_sim() else {
        eprintln!("skipped: no devin-remote-sim binary (cargo build -p remote-sim)");
        return;
    };
    let emu = Emulator::start(EmulatorConfig {
        status_lag: Duration::from_millis(20),
        remote_binary: Some(binary.clone()),
        ..EmulatorConfig::default()
    })
    .await
    .unwrap();
    assert!(!emu.remote_sha().is_empty());
    let outpost = emu.create_outpost("e2e", Platform::Linux);
    let id = emu
        .create_session(NewSession {
            outpost_id: outpost,
            script: Script {
                steps: vec![
                    Step::Run {
                        command: "echo from-sim".into(),
                    },
                    Step::Crash { code: 7, times: 1 },
                    Step::Write {
                        path: "out/notes.txt".into(),
                        content: "hello".into(),
                    },
                ],
                then: Then::End,
            },
            ..Default::default()
        })
        .unwrap();
    let claimed = claim(&emu, &id).await;

    assert_eq!(run_remote(&binary, &claimed, &id).await, Some(7));
    assert_eq!(run_remote(&binary, &claimed, &id).await, Some(0));

    let deadline = tokio::time::Instant::now() + PATIENCE;
    while emu.session(&id).unwrap().session_status != SessionStatus::Terminated {
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never followed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let view = emu.session(&id).unwrap();
    let steps: Vec<_> = view.events("step").collect();
    assert_eq!(steps.len(), 3, "{:#?}", view.transcript);
    assert_eq!(steps[0].detail["output"], "from-sim\n");
    assert_eq!(steps[0].detail["exit_code"], 0);
    assert_eq!(view.connections, 2);
    assert_eq!(view.events("hello").count(), 2);
}
