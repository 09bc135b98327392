//! The demo's scripted sessions: what each one does, what the demo does to
//! it along the way (resume, terminate), and what must have happened.
//!
//! Only tools in the `default` image are used (sh, coreutils, git), so the
//! same scripts run on the host and in containers.

use std::time::{Duration, Instant};

use emulator::{Emulator, NewSession, Script, SessionView, Step, Then};
use fleet::SessionStatus;

/// Printed by the program the build session builds; the expectation looks
/// for it in the output.
const GREETING: &str = "hello from a Garrison sandbox";

/// Which part a session plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Writes a small project, commits it with git, builds and runs it.
    Build,
    /// Writes files, is suspended, resumed, and finds its files intact.
    Notes,
    /// Works until Devin ends it.
    Worker,
}

impl Role {
    pub(super) const ALL: [Role; 3] = [Role::Build, Role::Notes, Role::Worker];

    pub(super) fn label(self) -> &'static str {
        match self {
            Role::Build => "build",
            Role::Notes => "notes",
            Role::Worker => "worker",
        }
    }

    pub(super) fn story(self) -> &'static str {
        match self {
            Role::Build => "writes a small project, commits it with git, builds and runs it",
            Role::Notes => "writes notes, is suspended, resumed, and finds them intact",
            Role::Worker => "waits for work until Devin ends the session",
        }
    }

    /// Steps over the session's life (both scripts for `Notes`).
    pub(super) fn total_steps(self) -> usize {
        match self {
            Role::Build => 4,
            Role::Notes => 3,
            Role::Worker => 1,
        }
    }

    /// The script the session is enqueued with.
    pub(super) fn script(self) -> Script {
        match self {
            Role::Build => Script {
                steps: vec![
                    write(
                        "hello/src/greet.sh",
                        &format!("echo \"{GREETING}: $(uname -s) $(uname -m)\"\n"),
                    ),
                    write("hello/build.sh", BUILD_SH),
                    run("cd hello && git init -q && git add -A && \
                         git -c user.name=demo -c user.email=demo@example.invalid \
                         commit -q -m 'first commit' && git log --oneline"),
                    run("cd hello && sh build.sh && ./out/hello"),
                ],
                then: Then::End,
            },
            Role::Notes => Script {
                steps: vec![
                    write(
                        "notes/todo.txt",
                        "1. write these notes\n2. sleep\n3. wake up with them\n",
                    ),
                    run(
                        "date -u +%FT%TZ > notes/written-at && sha256sum notes/* > notes.sha256 && cat notes.sha256",
                    ),
                ],
                then: Then::Sleep,
            },
            Role::Worker => Script {
                steps: vec![run("echo \"ready for work in $(pwd)\"")],
                then: Then::Wait,
            },
        }
    }

    /// The script a `Notes` session is resumed with.
    pub(super) fn resume_script() -> Script {
        Script {
            steps: vec![run("sha256sum -c notes.sha256 && cat notes/todo.txt")],
            then: Then::End,
        }
    }
}

/// The "build": assemble the program from its sources, check it, install
/// it into out/. A C compiler is not in the default image; this is the same
/// shape of work with the tools that are.
const BUILD_SH: &str = "#!/bin/sh
set -e
mkdir -p out
{ echo '#!/bin/sh'; cat src/*.sh; } > out/hello
chmod +x out/hello
./out/hello | grep -q 'hello from a Garrison sandbox'
echo \"build ok: out/hello, $(wc -c < out/hello) bytes, from commit $(git rev-parse --short HEAD)\"
";

fn run(command: &str) -> Step {
    Step::Run {
        command: command.to_owned(),
    }
}

fn write(path: &str, content: &str) -> Step {
    Step::Write {
        path: path.to_owned(),
        content: content.to_owned(),
    }
}

/// One demo session as the demo follows it.
pub(super) struct Tracked {
    pub role: Role,
    pub id: String,
    pub enqueued: Instant,
    /// When it was over on both sides (Devin and Garrison).
    pub finished: Option<Duration>,
    /// Garrison's stage labels, in the order they were seen.
    pub stages: Vec<String>,
    pub resumed: bool,
    pub terminate_sent: bool,
    /// Ended by the demo on a stop signal, whatever its script says.
    pub abandoned: bool,
    /// The last Garrison event printed (the store's event id).
    pub events_after: i64,
    /// Transcript entries of the emulator already looked at.
    pub transcript_seen: usize,
}

impl Tracked {
    pub(super) fn enqueue(emu: &Emulator, outpost_id: &str, role: Role) -> anyhow::Result<Tracked> {
        let id = emu.create_session(NewSession {
            outpost_id: outpost_id.to_owned(),
            script: role.script(),
            ..Default::default()
        })?;
        Ok(Tracked {
            role,
            id,
            enqueued: Instant::now(),
            finished: None,
            stages: Vec::new(),
            resumed: false,
            terminate_sent: false,
            abandoned: false,
            events_after: 0,
            transcript_seen: 0,
        })
    }

    pub(super) fn label(&self) -> &'static str {
        self.role.label()
    }

    pub(super) fn stage(&self) -> &str {
        self.stages.last().map_or("queued", String::as_str)
    }
}

/// What the demo does to a session now, playing Devin's part.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
    Resume,
    Terminate,
}

/// The next action for a session, if any: resume `Notes` once Garrison has
/// put it away; end `Worker` once it did its step and waits.
pub(super) fn next_action(t: &Tracked, view: &SessionView) -> Option<Action> {
    match t.role {
        Role::Notes
            if !t.resumed
                && view.session_status == SessionStatus::Suspended
                && t.stage() == "suspended" =>
        {
            Some(Action::Resume)
        }
        Role::Worker
            if !t.terminate_sent
                && view.connected
                && view.steps_done >= 1
                && t.stage() == "running" =>
        {
            Some(Action::Terminate)
        }
        _ => None,
    }
}

/// Over on both sides: Devin says terminated, every claim was released,
/// and Garrison recorded the end. An abandoned session is over without
/// having played its part (a `Notes` never resumed), or without Garrison
/// having claimed it at all.
pub(super) fn is_finished(t: &Tracked, view: &SessionView) -> bool {
    let claims = view.events("claimed").count();
    let let_go = view.session_status == SessionStatus::Terminated
        && view.events("released").count() >= claims;
    if t.abandoned {
        return let_go && (claims == 0 || t.stage() == "terminated");
    }
    let_go && claims > 0 && t.stage() == "terminated" && (t.role != Role::Notes || t.resumed)
}

/// The step results of a session's transcript: (exit code, output).
pub(super) fn step_results(view: &SessionView) -> Vec<(i64, String)> {
    view.events("step")
        .filter(|e| e.detail.get("exit_code").is_some())
        .map(|e| {
            let code = e.detail["exit_code"].as_i64().unwrap_or(-1);
            let output = e.detail["output"].as_str().unwrap_or_default().to_owned();
            (code, output)
        })
        .collect()
}

/// One expectation and whether it held.
pub(super) struct Expectation {
    pub what: String,
    pub passed: bool,
}

/// What must have happened to `t`; `snapshotted` says whether Garrison
/// recorded a snapshot of it.
pub(super) fn expectations(t: &Tracked, view: &SessionView, snapshotted: bool) -> Vec<Expectation> {
    let results = step_results(view);
    let all_ok = results.len() == t.role.total_steps() && results.iter().all(|(c, _)| *c == 0);
    let label = t.label();
    let steps = match t.role.total_steps() {
        1 => "its step".to_owned(),
        n => format!("all {n} steps"),
    };
    let mut out = vec![Expectation {
        what: format!("{label}: {steps} ran and exited 0"),
        passed: all_ok,
    }];
    match t.role {
        Role::Build => out.push(Expectation {
            what: format!("{label}: the built program ran and printed {GREETING:?}"),
            passed: results.last().is_some_and(|(_, o)| o.contains(GREETING)),
        }),
        Role::Notes => {
            out.push(Expectation {
                what: format!("{label}: suspended with a snapshot of its workspace"),
                passed: snapshotted && t.stages.iter().any(|s| s == "suspended"),
            });
            out.push(Expectation {
                what: format!("{label}: resumed in a new sandbox with its files intact"),
                passed: t.resumed
                    && view.connections >= 2
                    && results
                        .last()
                        .is_some_and(|(c, o)| *c == 0 && o.contains("notes/todo.txt: OK")),
            });
        }
        Role::Worker => out.push(Expectation {
            what: format!("{label}: stopped and cleaned up when Devin ended it"),
            passed: t.terminate_sent && t.stage() == "terminated",
        }),
    }
    out.push(Expectation {
        what: format!("{label}: finished (terminated, claim released)"),
        passed: t.finished.is_some(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracked(role: Role, stages: &[&str]) -> Tracked {
        Tracked {
            role,
            id: "devin-1".to_owned(),
            enqueued: Instant::now(),
            finished: None,
            stages: stages.iter().map(|s| (*s).to_owned()).collect(),
            resumed: false,
            terminate_sent: false,
            abandoned: false,
            events_after: 0,
            transcript_seen: 0,
        }
    }

    fn view(status: SessionStatus, events: &[&str]) -> SessionView {
        SessionView {
            session_id: "devin-1".to_owned(),
            outpost_id: "demo".to_owned(),
            entry: None,
            session_status: status,
            connections: 1,
            connected: false,
            steps_done: 0,
            transcript: events
                .iter()
                .map(|kind| emulator::TranscriptEvent {
                    at_ms: 0,
                    kind: (*kind).to_owned(),
                    detail: serde_json::Value::Null,
                })
                .collect(),
        }
    }

    #[test]
    fn an_abandoned_session_is_over_once_devin_ended_it_and_garrison_let_go() {
        let done = view(SessionStatus::Terminated, &["claimed", "released"]);
        // Interrupted before its resume: over only because it was abandoned.
        let mut notes = tracked(Role::Notes, &["running", "terminated"]);
        assert!(!is_finished(&notes, &done));
        notes.abandoned = true;
        assert!(is_finished(&notes, &done));
        // Never claimed: nothing of Garrison's to wait for.
        let mut queued = tracked(Role::Build, &[]);
        queued.abandoned = true;
        assert!(is_finished(&queued, &view(SessionStatus::Terminated, &[])));
        // Still held by Garrison: not over.
        let held = view(SessionStatus::Terminated, &["claimed"]);
        assert!(!is_finished(&queued, &held));
    }
}
