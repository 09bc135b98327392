//! The scripted "brain": decides, from a session's state, what the connected
//! remote must do next, and books the results. Pure transitions on
//! [`State`]; the socket work is in `gateway.rs`.

use gateway_proto::GatewayMessage;
use serde_json::json;

use crate::model::{Step, Then};
use crate::state::{State, Stop};

/// What the gateway does next for a connected remote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Send a step and wait for the result with this id.
    Step(GatewayMessage, u64),
    /// Send a crash: the remote exits without a result.
    Crash(GatewayMessage),
    /// Send sleep/end and wait for the remote to hang up.
    Stop(GatewayMessage),
    /// Nothing to do until the admin API asks for something.
    Idle,
}

impl State {
    /// The next command for the remote of `session_id`. Delivering a crash
    /// counts at once (no result will come); the step is done after its
    /// `times`-th delivery.
    pub(crate) fn brain_next(&mut self, session_id: &str, now: i64) -> Command {
        let Some(s) = self.sessions.get_mut(session_id) else {
            return Command::Stop(GatewayMessage::End);
        };
        let stop = s.stopping.or(match s.status {
            fleet::SessionStatus::Suspended => Some(Stop::Sleep),
            fleet::SessionStatus::Terminated => Some(Stop::End),
            _ => None,
        });
        if let Some(stop) = stop {
            return stop_command(s, stop, now);
        }
        loop {
            let index = s.next_step;
            let Some(step) = s.script.steps.get(index).cloned() else {
                break;
            };
            let id = index as u64;
            match step {
                Step::Run { command } => {
                    return Command::Step(GatewayMessage::Exec { id, command }, id);
                }
                Step::Write { path, content } => {
                    return Command::Step(GatewayMessage::WriteFile { id, path, content }, id);
                }
                Step::Crash { times, .. } if s.crashes >= times => {
                    s.next_step += 1;
                    s.crashes = 0;
                }
                Step::Crash { code, times } => {
                    s.crashes += 1;
                    let attempt = s.crashes;
                    s.record(
                        now,
                        "step",
                        json!({"index": index, "crash": code, "attempt": attempt, "times": times}),
                    );
                    if s.crashes >= times {
                        s.next_step += 1;
                        s.crashes = 0;
                    }
                    return Command::Crash(GatewayMessage::Crash { id, code });
                }
            }
        }
        match s.script.then {
            Then::Wait => Command::Idle,
            Then::Sleep => {
                s.stopping = Some(Stop::Sleep);
                stop_command(s, Stop::Sleep, now)
            }
            Then::End => {
                s.stopping = Some(Stop::End);
                stop_command(s, Stop::End, now)
            }
        }
    }

    /// Books a step's result. Only the result of the step in flight counts;
    /// anything else is kept in the transcript as unexpected.
    pub(crate) fn brain_result(
        &mut self,
        session_id: &str,
        id: u64,
        exit_code: i32,
        output: &str,
        truncated: bool,
        now: i64,
    ) {
        let Some(s) = self.sessions.get_mut(session_id) else {
            return;
        };
        let index = s.next_step;
        if id != index as u64 {
            s.record(
                now,
                "unexpected_result",
                json!({"id": id, "exit_code": exit_code}),
            );
            return;
        }
        let mut detail = json!({
            "index": index,
            "exit_code": exit_code,
            "output": output,
            "truncated": truncated,
        });
        match s.script.steps.get(index) {
            Some(Step::Run { command }) => detail["command"] = json!(command),
            Some(Step::Write { path, .. }) => detail["path"] = json!(path),
            _ => {}
        }
        s.record(now, "step", detail);
        s.next_step += 1;
    }
}

fn stop_command(s: &mut crate::state::SessionRec, stop: Stop, now: i64) -> Command {
    let (message, name) = match stop {
        Stop::Sleep => (GatewayMessage::Sleep, "sleep"),
        Stop::End => (GatewayMessage::End, "end"),
    };
    s.record(now, "stop", json!({"message": name}));
    Command::Stop(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NewSession, Script};
    use crate::state::Timing;
    use fleet::Platform;

    fn with_script(script: Script) -> State {
        let mut s = State::new(Timing::default());
        let o = s.create_outpost("lab", Platform::Linux, None, 0);
        s.create_session(
            NewSession {
                outpost_id: o,
                session_id: Some("devin-1".into()),
                script,
                ..Default::default()
            },
            0,
        )
        .unwrap();
        s
    }

    #[test]
    fn steps_then_end_and_done_steps_are_not_resent() {
        let mut s = with_script(Script {
            steps: vec![
                Step::Run {
                    command: "echo hi".into(),
                },
                Step::Write {
                    path: "a.txt".into(),
                    content: "x".into(),
                },
            ],
            then: Then::End,
        });
        let Command::Step(GatewayMessage::Exec { id, .. }, _) = s.brain_next("devin-1", 0) else {
            panic!("exec first");
        };
        s.brain_result("devin-1", id, 0, "hi\n", false, 0);
        // A reconnecting remote continues with the write.
        assert!(matches!(
            s.brain_next("devin-1", 0),
            Command::Step(GatewayMessage::WriteFile { id: 1, .. }, 1)
        ));
        s.brain_result("devin-1", 1, 0, "", false, 0);
        assert_eq!(
            s.brain_next("devin-1", 0),
            Command::Stop(GatewayMessage::End)
        );
        let v = s.view("devin-1").unwrap();
        assert_eq!(v.steps_done, 2);
        let first = v.events("step").next().unwrap();
        assert_eq!(first.detail["command"], "echo hi");
        assert_eq!(first.detail["output"], "hi\n");
    }

    #[test]
    fn crash_repeats_on_consecutive_connections_then_counts_as_done() {
        let mut s = with_script(Script {
            steps: vec![Step::Crash { code: 3, times: 2 }],
            then: Then::Sleep,
        });
        for _ in 0..2 {
            assert_eq!(
                s.brain_next("devin-1", 0),
                Command::Crash(GatewayMessage::Crash { id: 0, code: 3 })
            );
        }
        assert_eq!(
            s.brain_next("devin-1", 0),
            Command::Stop(GatewayMessage::Sleep)
        );
    }

    #[test]
    fn wait_idles_until_a_stop_is_requested() {
        let mut s = with_script(Script {
            steps: vec![],
            then: Then::Wait,
        });
        assert_eq!(s.brain_next("devin-1", 0), Command::Idle);
        s.request_stop("devin-1", Stop::Sleep, 0).unwrap();
        assert_eq!(
            s.brain_next("devin-1", 0),
            Command::Stop(GatewayMessage::Sleep)
        );
    }

    #[test]
    fn stray_results_are_recorded_not_counted() {
        let mut s = with_script(Script {
            steps: vec![Step::Run {
                command: "true".into(),
            }],
            then: Then::End,
        });
        s.brain_result("devin-1", 7, 0, "", false, 0);
        let v = s.view("devin-1").unwrap();
        assert_eq!(v.steps_done, 0);
        assert_eq!(v.events("unexpected_result").count(), 1);
    }
}
