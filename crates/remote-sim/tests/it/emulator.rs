//! The simulator against the project's emulator: the real gateway, real
//! connect tokens from a real claim, and the brain's transcript as the
//! record of what the simulator did.

use crate::common;

use std::time::Duration;

use common::{Sim, SimEnv, patiently};
use emulator::{Emulator, EmulatorConfig, NewSession, Script, SessionView, Step, Then};
use fleet::{Platform, SessionStatus};
use serde_json::{Value, json};

struct Lab {
    emu: Emulator,
    outpost: String,
}

/// What a claim hands the orchestrator for one session.
struct Claimed {
    session_id: String,
    gateway_url: String,
    connect_token: String,
}

impl Lab {
    async fn start() -> Lab {
        let emu = Emulator::start(EmulatorConfig {
            // The status follows the remote's exit after this lag; short so
            // the polling below ends soon.
            status_lag: Duration::from_millis(20),
            remote_binary: Some(common::bin().into()),
            ..EmulatorConfig::default()
        })
        .await
        .unwrap();
        let outpost = emu.create_outpost("remote-sim-tests", Platform::Linux);
        Lab { emu, outpost }
    }

    async fn session(&self, steps: Vec<Step>, then: Then) -> Claimed {
        let session_id = self
            .emu
            .create_session(NewSession {
                outpost_id: self.outpost.clone(),
                script: Script { steps, then },
                ..Default::default()
            })
            .unwrap();
        let response = reqwest::Client::new()
            .post(format!(
                "{}/opbeta/outposts/devins/{session_id}/claim",
                self.emu.base_url()
            ))
            .bearer_auth(self.emu.account_token())
            .json(&json!({"acceptor_id": "remote-sim-tests"}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let entry: Value = response.json().await.unwrap();
        Claimed {
            session_id,
            gateway_url: entry["status"]["gateway_url"].as_str().unwrap().into(),
            connect_token: entry["status"]["connect_token"].as_str().unwrap().into(),
        }
    }

    fn view(&self, session_id: &str) -> SessionView {
        self.emu.session(session_id).unwrap()
    }

    /// Polls until the emulator's view satisfies `done` (bounded by
    /// [`common::PATIENCE`]; nothing here depends on how long it takes).
    async fn until(&self, what: &str, session_id: &str, done: impl Fn(&SessionView) -> bool) {
        patiently(what, async {
            while !done(&self.view(session_id)) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
}

fn start_sim(claimed: &Claimed, token: &str, session_id: &str) -> Sim {
    Sim::start(SimEnv {
        gateway_url: &claimed.gateway_url,
        token,
        session_id,
        extra: &[],
    })
}

#[tokio::test]
async fn a_wrong_token_is_refused_with_exit_3() {
    let lab = Lab::start().await;
    let claimed = lab.session(vec![], Then::End).await;

    let mut sim = start_sim(&claimed, "not-the-token", &claimed.session_id);
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 3, "{stderr}");

    // A genuine token, but for another session.
    let other = lab.session(vec![], Then::End).await;
    let mut sim = start_sim(&other, &other.connect_token, &claimed.session_id);
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 3, "{stderr}");
    assert!(!stderr.contains(&other.connect_token), "{stderr}");

    assert_eq!(lab.view(&claimed.session_id).connections, 0);
}

#[tokio::test]
async fn runs_the_script_and_exits_0_when_the_session_ends() {
    let lab = Lab::start().await;
    let claimed = lab
        .session(
            vec![
                Step::Run {
                    command: "echo from-sim; echo to-stderr >&2".into(),
                },
                Step::Write {
                    path: "notes/plan.md".into(),
                    content: "ship it\n".into(),
                },
                Step::Run {
                    command: "cat notes/plan.md".into(),
                },
                Step::Write {
                    path: "../outside.txt".into(),
                    content: "no".into(),
                },
                Step::Run {
                    command: "env".into(),
                },
            ],
            Then::End,
        )
        .await;

    let mut sim = start_sim(&claimed, &claimed.connect_token, &claimed.session_id);
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(sim.workdir.join("notes/plan.md")).unwrap(),
        "ship it\n"
    );
    assert!(!sim.workdir.parent().unwrap().join("outside.txt").exists());

    lab.until("the session to terminate", &claimed.session_id, |v| {
        v.session_status == SessionStatus::Terminated
    })
    .await;
    let view = lab.view(&claimed.session_id);
    let steps: Vec<&Value> = view.events("step").map(|e| &e.detail).collect();
    assert_eq!(steps.len(), 5, "{:#?}", view.transcript);
    assert_eq!(steps[0]["output"], "from-sim\nto-stderr\n");
    assert_eq!(steps[0]["exit_code"], 0);
    assert_eq!(steps[1]["exit_code"], 0);
    assert_eq!(steps[2]["output"], "ship it\n");
    assert_eq!(steps[3]["exit_code"], 1);
    let env = steps[4]["output"].as_str().unwrap();
    assert!(!env.contains(&claimed.connect_token), "{env}");
    assert_eq!(view.connections, 1);
    assert_eq!(view.events("hello").count(), 1);

    // The simulator's own record agrees, and holds no token.
    let log = std::fs::read_to_string(sim.state_dir.join("steps.log")).unwrap();
    assert_eq!(log.lines().count(), 6, "{log}");
    assert!(log.lines().last().unwrap().contains("\"end\""), "{log}");
    assert!(!log.contains(&claimed.connect_token));
    let state = std::fs::read_to_string(sim.state_dir.join("state.json")).unwrap();
    assert!(!state.contains(&claimed.connect_token));
}

#[tokio::test]
async fn exits_0_when_the_session_sleeps() {
    let lab = Lab::start().await;
    let claimed = lab
        .session(
            vec![Step::Run {
                command: "true".into(),
            }],
            Then::Sleep,
        )
        .await;
    let mut sim = start_sim(&claimed, &claimed.connect_token, &claimed.session_id);
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 0, "{stderr}");
    lab.until("the session to suspend", &claimed.session_id, |v| {
        v.session_status == SessionStatus::Suspended
    })
    .await;
}

#[tokio::test]
async fn exits_0_when_a_waiting_session_is_terminated() {
    let lab = Lab::start().await;
    let claimed = lab.session(vec![], Then::Wait).await;
    let mut sim = start_sim(&claimed, &claimed.connect_token, &claimed.session_id);
    lab.until("the simulator to connect", &claimed.session_id, |v| {
        v.connected
    })
    .await;
    lab.emu.terminate(&claimed.session_id).unwrap();
    let (code, stderr) = sim.finish().await;
    assert_eq!(code, 0, "{stderr}");
}

#[tokio::test]
async fn resumes_the_script_after_a_crash() {
    let lab = Lab::start().await;
    let claimed = lab
        .session(
            vec![
                Step::Crash { code: 7, times: 1 },
                Step::Run {
                    command: "echo after".into(),
                },
            ],
            Then::End,
        )
        .await;
    let mut first = start_sim(&claimed, &claimed.connect_token, &claimed.session_id);
    assert_eq!(first.finish().await.0, 7);
    let mut second = start_sim(&claimed, &claimed.connect_token, &claimed.session_id);
    assert_eq!(second.finish().await.0, 0);
    let view = lab.view(&claimed.session_id);
    assert_eq!(view.connections, 2);
    let last = view.events("step").last().unwrap();
    assert_eq!(last.detail["output"], "after\n");
}
