//! The sessions of a chaos run: some run a while and end; the others
//! (sleepers) go through suspend/resume cycles, each phase checking the
//! workspace the last one left (a random blob against its checksum, and
//! the last note) and leaving a new one. The bench resumes a sleeper once
//! it is suspended and released, and remembers each phase's note so the
//! checker can tell what each resume had to find.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use emulator::{Emulator, NewSession, Script, SessionView, Step, Then};
use fleet::{Phase, SessionStatus};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::checker::NOTE_FILE;
use super::history::SessionHistory;

/// One session still to be enqueued.
struct Planned {
    at: Duration,
    sleeper: bool,
    /// Resumes after the first phase (sleepers).
    resumes: u32,
}

/// A sleeper's progress.
struct Sleeper {
    /// Notes of the phases started, in order.
    notes: Vec<String>,
    resumes_left: u32,
    resume_at: Option<Instant>,
}

/// The run's sessions.
pub(crate) struct Workload {
    outpost: String,
    rng: StdRng,
    planned: Vec<Planned>,
    /// Every session enqueued, in order.
    ids: Vec<String>,
    sleepers: BTreeMap<String, Sleeper>,
}

fn run(command: &str) -> Step {
    Step::Run {
        command: command.into(),
    }
}

fn write_note(note: &str) -> Step {
    Step::Write {
        path: NOTE_FILE.into(),
        content: note.into(),
    }
}

/// A new random blob with its checksum, then a while of work.
fn new_blob(secs: u32, done: &str) -> Step {
    run(&format!(
        "head -c 200000 /dev/urandom > blob && sha256sum blob > blob.sha256 && sleep {secs} && echo {done}"
    ))
}

/// Prints `saw ok <note>` when the blob matches its checksum (see
/// `checker::expected_sighting`).
fn look() -> Step {
    run(
        "echo \"saw $(sha256sum -c --quiet blob.sha256 >/dev/null 2>&1 && echo ok || echo BAD) $(cat note.txt)\"",
    )
}

impl Workload {
    /// `sessions` sessions, half of them sleepers with 2 or 3 resumes,
    /// enqueued evenly over `spread`.
    pub(crate) fn new(seed: u64, outpost: &str, sessions: usize, spread: Duration) -> Workload {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_1e55);
        let planned = (0..sessions)
            .map(|n| Planned {
                at: spread.mul_f64(n as f64 / sessions.max(1) as f64),
                sleeper: n % 2 == 0,
                resumes: rng.random_range(2..=3),
            })
            .rev()
            .collect();
        Workload {
            outpost: outpost.to_owned(),
            rng,
            planned,
            ids: Vec::new(),
            sleepers: BTreeMap::new(),
        }
    }

    fn note(&mut self, n: usize, phase: usize) -> String {
        format!("note {n}.{phase} {:016x}", self.rng.random::<u64>())
    }

    /// Enqueues what is due at `elapsed` and resumes every sleeper that is
    /// suspended, released and has waited its turn.
    pub(crate) fn drive(&mut self, emu: &Emulator, elapsed: Duration) -> anyhow::Result<()> {
        while self.planned.last().is_some_and(|p| p.at <= elapsed) {
            let p = self.planned.pop().expect("checked above");
            let n = self.ids.len();
            let secs = self.rng.random_range(3..=10);
            let script = if p.sleeper {
                let note = self.note(n, 0);
                let script = Script {
                    steps: vec![write_note(&note), new_blob(secs, "made")],
                    then: Then::Sleep,
                };
                (script, Some((note, p.resumes)))
            } else {
                let secs = self.rng.random_range(5..=20);
                let script = Script {
                    steps: vec![run(&format!("sleep {secs} && echo served-{n}"))],
                    then: Then::End,
                };
                (script, None)
            };
            let id = emu.create_session(NewSession {
                outpost_id: self.outpost.clone(),
                script: script.0,
                ..Default::default()
            })?;
            if let Some((note, resumes)) = script.1 {
                let sleeper = Sleeper {
                    notes: vec![note],
                    resumes_left: resumes,
                    resume_at: None,
                };
                self.sleepers.insert(id.clone(), sleeper);
            }
            self.ids.push(id);
        }
        let now = Instant::now();
        let ready: Vec<String> = self
            .sleepers
            .iter()
            .filter(|(_, s)| s.resumes_left > 0)
            .filter(|(id, _)| emu.session(id).is_some_and(|v| suspended_and_released(&v)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ready {
            let wait = Duration::from_millis(self.rng.random_range(500..4_000));
            let n = self.ids.iter().position(|i| *i == id).unwrap_or_default();
            let s = self.sleepers.get_mut(&id).expect("listed above");
            let Some(at) = s.resume_at else {
                s.resume_at = Some(now + wait);
                continue;
            };
            if at > now {
                continue;
            }
            let phase = s.notes.len();
            let last = s.resumes_left == 1;
            let secs = self.rng.random_range(3..=10);
            let note = self.note(n, phase);
            let script = Script {
                steps: vec![look(), write_note(&note), new_blob(secs, "rewrote")],
                then: if last { Then::End } else { Then::Sleep },
            };
            emu.resume(&id, script)?;
            let s = self.sleepers.get_mut(&id).expect("listed above");
            s.notes.push(note);
            s.resumes_left -= 1;
            s.resume_at = None;
        }
        Ok(())
    }

    /// Whether every session was enqueued and has ended, released.
    pub(crate) fn finished(&self, emu: &Emulator) -> bool {
        self.planned.is_empty()
            && self.ids.iter().all(|id| {
                emu.session(id)
                    .is_some_and(|v| v.session_status == SessionStatus::Terminated && unclaimed(&v))
            })
    }

    /// Every session's history.
    pub(crate) fn histories(&self, emu: &Emulator) -> Vec<SessionHistory> {
        self.ids
            .iter()
            .filter_map(|id| {
                let view = emu.session(id)?;
                let notes = self
                    .sleepers
                    .get(id)
                    .map(|s| s.notes.clone())
                    .unwrap_or_default();
                Some(SessionHistory { view, notes })
            })
            .collect()
    }
}

fn unclaimed(v: &SessionView) -> bool {
    v.entry
        .as_ref()
        .is_none_or(|e| e.status.phase != Phase::Claimed)
}

fn suspended_and_released(v: &SessionView) -> bool {
    v.session_status == SessionStatus::Suspended && unclaimed(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::checker::expected_sighting;

    #[test]
    fn the_look_step_prints_what_the_checker_expects() {
        let dir = tempfile::tempdir().unwrap();
        let sh = |cmd: &str| {
            let out = std::process::Command::new("sh")
                .args(["-c", cmd])
                .current_dir(dir.path())
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        std::fs::write(dir.path().join("note.txt"), "note 1.0 abc").unwrap();
        let Step::Run { command } = new_blob(0, "made") else {
            unreachable!()
        };
        assert_eq!(sh(&command).trim(), "made");
        let Step::Run { command } = look() else {
            unreachable!()
        };
        assert_eq!(sh(&command).trim(), expected_sighting("note 1.0 abc"));
        std::fs::write(dir.path().join("blob"), "changed").unwrap();
        assert_eq!(sh(&command).trim(), "saw BAD note 1.0 abc");
    }
}
