//! The fault injector: starts what the scheduler planned on the rig,
//! heals it when its time is up, and records each fault with its start and
//! heal for the checker. Fleet-wide faults are the emulator's own
//! (`error_rate`, `lost_answer_rate`) on top of the run's standing ones.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use emulator::Faults;

use super::history::{FaultKind, FaultRecord};
use super::rig::{Rig, now_ms};
use super::schedule::{Active, Plan};

/// The file that fills a host's state directory.
const FILL: &str = "chaos-fill";

struct Running {
    record: usize,
    plan: Plan,
    until: Instant,
}

/// The faults in force and every one injected so far.
pub(crate) struct Injector {
    base: Faults,
    running: Vec<Running>,
    /// Every fault injected, healed ones with their heal time.
    pub(crate) records: Vec<FaultRecord>,
}

impl Injector {
    /// No fault in force; `base` is the emulator's standing misbehaviour.
    pub(crate) fn new(base: Faults) -> Injector {
        Injector {
            base,
            running: Vec::new(),
            records: Vec::new(),
        }
    }

    /// The faults in force, for the scheduler.
    pub(crate) fn active(&self) -> Vec<Active> {
        self.running
            .iter()
            .map(|r| Active {
                kind: r.plan.kind,
                host: r.plan.host,
            })
            .collect()
    }

    /// Whether host `n`'s Garrison is down on purpose (killed, not yet
    /// restarted).
    pub(crate) fn killed(&self, n: usize) -> bool {
        self.running
            .iter()
            .any(|r| r.plan.kind == FaultKind::KillRestart && r.plan.host == Some(n))
    }

    /// Injects `plan`.
    pub(crate) async fn start(&mut self, rig: &mut Rig, plan: Plan) -> anyhow::Result<()> {
        let host = plan.host;
        match (plan.kind, host) {
            (FaultKind::KillRestart, Some(h)) => rig.garrisons[h].kill9(),
            (FaultKind::Pause, Some(h)) => rig.garrisons[h].pause(true),
            (FaultKind::CutFleet, Some(h)) => rig.hosts.cut(h, &[rig.fleet])?,
            (FaultKind::CutStore, Some(h)) => rig.hosts.cut(h, &[rig.store.addr])?,
            (FaultKind::CutBoth, Some(h)) => rig.hosts.cut(h, &[rig.fleet, rig.store.addr])?,
            (FaultKind::DiskFull, Some(h)) => {
                let file = rig.garrisons[h].state_dir.join(FILL);
                tokio::task::spawn_blocking(move || fill(file))
                    .await
                    .context("filling a disk")??;
            }
            (FaultKind::ClockStep, Some(h)) => rig.garrisons[h].step_clock(plan.step_secs)?,
            (FaultKind::ApiErrors | FaultKind::LostAnswers, None) => {}
            (kind, host) => anyhow::bail!("{} cannot go on host {host:?}", kind.name()),
        }
        self.records.push(FaultRecord {
            kind: plan.kind,
            host,
            start_ms: now_ms(),
            end_ms: None,
        });
        self.running.push(Running {
            record: self.records.len() - 1,
            plan,
            until: Instant::now() + Duration::from_millis(plan.duration_ms),
        });
        if !plan.kind.per_host() {
            rig.emu.set_faults(self.emulator_faults());
        }
        let step = match plan.kind {
            FaultKind::ClockStep => format!(" ({:+} s)", plan.step_secs),
            _ => String::new(),
        };
        progress(&format!(
            "{}{step} {} for {:.1} s",
            plan.kind.name(),
            host.map_or("on the fleet API".to_owned(), |h| format!("on host {h}")),
            plan.duration_ms as f64 / 1000.0
        ));
        Ok(())
    }

    /// Heals every fault whose time is up (all of them with `all`).
    pub(crate) async fn heal(&mut self, rig: &mut Rig, all: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        let (due, kept): (Vec<Running>, Vec<Running>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|r| all || r.until <= now);
        self.running = kept;
        let mut fleet_changed = false;
        for r in due {
            match (r.plan.kind, r.plan.host) {
                (FaultKind::KillRestart, Some(h)) => rig.garrisons[h].restart()?,
                (FaultKind::Pause, Some(h)) => rig.garrisons[h].pause(false),
                (FaultKind::CutFleet | FaultKind::CutStore | FaultKind::CutBoth, Some(h)) => {
                    rig.hosts.cut(h, &[])?
                }
                (FaultKind::DiskFull, Some(h)) => {
                    let file = rig.garrisons[h].state_dir.join(FILL);
                    std::fs::remove_file(&file)
                        .with_context(|| format!("freeing {}", file.display()))?;
                }
                (FaultKind::ClockStep, Some(h)) => rig.garrisons[h].step_clock(0)?,
                _ => fleet_changed = true,
            }
            self.records[r.record].end_ms = Some(now_ms());
        }
        if fleet_changed {
            rig.emu.set_faults(self.emulator_faults());
        }
        Ok(())
    }

    fn emulator_faults(&self) -> Faults {
        let rate = |kind: FaultKind| {
            self.running
                .iter()
                .filter(|r| r.plan.kind == kind)
                .map(|r| r.plan.rate)
                .fold(0.0, f64::max)
        };
        Faults {
            error_rate: rate(FaultKind::ApiErrors),
            lost_answer_rate: rate(FaultKind::LostAnswers),
            ..self.base.clone()
        }
    }
}

/// Writes zeros into `file` until its file system is full.
fn fill(file: PathBuf) -> anyhow::Result<()> {
    let mut out =
        std::fs::File::create(&file).with_context(|| format!("creating {}", file.display()))?;
    let chunk = vec![0u8; 1 << 20];
    loop {
        match out.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(e).with_context(|| format!("filling {}", file.display())),
        }
    }
    // The last partial chunk may have left a few bytes free.
    let _ = out.write_all(&chunk[..4096]);
    let _ = out.flush();
    Ok(())
}

fn progress(message: &str) {
    eprintln!("bench chaos: {message}");
}
