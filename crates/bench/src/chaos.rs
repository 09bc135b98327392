//! `garrison bench chaos`: three Garrisons (or `--hosts`), each in its own
//! network namespace, serve one outpost of the emulator in its strict mode
//! (duplicated watch events, claim answers without a deadline, whole-second
//! timestamps, short claims, transient `suspended` reads) and keep
//! snapshots in one S3 bucket (moto), while a seeded scheduler injects
//! overlapping faults: SIGKILL and restart, SIGSTOP past a claim's life,
//! a host cut off from the fleet API, the store or both (nft), bursts of
//! fleet API errors and of lost answers, a full state directory, and one
//! host's wall clock stepped (libfaketime, see `clock`).
//! Sessions run scripted steps, half of them through suspend/resume
//! cycles that check their workspace. After `--minutes` every fault is
//! healed, the sessions drain, and a checker goes over the whole history
//! (see `checker`). Without libfaketime, clock steps are skipped.
//!
//! Needs root (namespaces, nft, tmpfs mounts), the remote simulator and an
//! S3 server (`GARRISON_TEST_S3_SERVER`, else `target/python/bin/moto_server`).

mod checker;
mod clock;
mod faults;
mod garrison;
mod history;
mod hosts;
mod kept;
mod report;
mod rig;
mod schedule;
mod store;
mod workload;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use emulator::Faults;
use orchestrator::{Policy, renew_margin};

use faults::Injector;
use history::{Exit, History, HostHistory, Leftover};
use report::ChaosReport;
use rig::{Rig, Setup, now_ms};
use schedule::{Limits, decide};
use workload::Workload;

/// Options of `garrison bench chaos`.
#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// Hosts, each a Garrison in its own network namespace.
    #[arg(long, default_value_t = 3)]
    hosts: usize,
    /// Sessions in all (half of them suspend and resume 2 or 3 times),
    /// enqueued over the first half of the faults.
    #[arg(long, default_value_t = 24)]
    sessions: usize,
    /// How long faults are injected; the drain comes after.
    #[arg(long, default_value_t = 3.0)]
    minutes: f64,
    /// The scheduler's seed (random if not given; printed for replay).
    #[arg(long)]
    seed: Option<u64>,
    /// The sandbox backend every host runs.
    #[arg(long, value_enum, default_value_t = ChaosBackend::Host)]
    backend: ChaosBackend,
    /// Lifetime of the emulator's claims (short, so pauses outlive them).
    #[arg(long, default_value_t = 10)]
    claim_ttl_secs: u64,
    /// Longest wait, after the faults, for every session to end.
    #[arg(long, default_value_t = 300)]
    drain_secs: u64,
    /// Also print the figures as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

/// The backends a chaos run can use.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ChaosBackend {
    /// Processes on the host (`devin-remote-sim` as is).
    Host,
    /// Containers (runc); needs the images of `scripts/setup`.
    Local,
}

/// How soon after a fault heals its host must be ready again.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How often the bench looks at the fleet.
const LOOK: Duration = Duration::from_millis(250);
/// How often the scheduler may start a fault.
const TICK: Duration = Duration::from_secs(2);

/// The emulator's standing misbehaviour (short claims come from
/// `--claim-ttl-secs`).
fn strict_faults() -> Faults {
    Faults {
        duplicate_event_rate: 0.2,
        claim_deadline_missing_rate: 0.05,
        whole_second_timestamps: true,
        transient_suspended_rate: 0.02,
        ..Faults::default()
    }
}

fn progress(message: &str) {
    eprintln!("bench chaos: {message}");
}

pub(crate) async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    if args.hosts < 2 || args.sessions == 0 || args.minutes <= 0.0 {
        bail!("--hosts must be at least 2, --sessions at least 1, --minutes above 0");
    }
    if args.claim_ttl_secs < 4 {
        bail!("--claim-ttl-secs must be at least 4");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("bench chaos needs root: network namespaces, nft rules and tmpfs mounts");
    }
    for tool in ["ip", "nft", "nsenter", "mount"] {
        if which(tool).is_none() {
            bail!("bench chaos needs `{tool}` on PATH");
        }
    }
    let sim = emulator::locate_remote_sim().context(
        "devin-remote-sim not found next to this binary (or in $GARRISON_REMOTE_SIM); \
         build it with scripts/setup, which puts the static one in target/release",
    )?;
    let s3_server = store::locate_server().context(
        "no S3 server: set GARRISON_TEST_S3_SERVER to moto_server (scripts/setup installs it \
         in target/python/bin)",
    )?;
    let faketime = clock::locate();
    if faketime.is_none() {
        progress(
            "libfaketime not found (scripts/setup installs Debian's libfaketime): \
             clock_step faults are skipped",
        );
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    progress(&format!("seed {seed} (replay with --seed {seed})"));
    let backend = match args.backend {
        ChaosBackend::Host => "host",
        ChaosBackend::Local => "local",
    };
    let setup = Setup {
        hosts: args.hosts,
        sessions: args.sessions,
        backend,
        claim_ttl: Duration::from_secs(args.claim_ttl_secs),
        faults: strict_faults(),
        sim,
        s3_server,
        faketime,
    };
    let started = Instant::now();
    // An interrupted run takes down what it made (hosts, namespaces,
    // mounts, the store) as it goes, instead of leaving it all up.
    let mut rig = until_interrupted(Rig::start(&setup)).await??;
    let clock_steps = setup.faketime.is_some();
    let Ok(outcome) = until_interrupted(drive(&mut rig, &args, seed, clock_steps)).await else {
        progress("interrupted: taking the hosts down");
        rig.stop().await;
        bail!("interrupted; the hosts, their namespaces and mounts were taken down");
    };
    let logs: Vec<String> = rig.garrisons.iter().map(|g| g.log_tail(40)).collect();
    let found = outcome.as_ref().map(checker::check).unwrap_or_default();
    if !found.is_empty() {
        keep_logs(&rig, seed);
    }
    rig.stop().await;
    let history = outcome?;
    let report = ChaosReport::of(
        &history,
        &found,
        seed,
        args.minutes,
        backend,
        clock_steps,
        started.elapsed().as_secs_f64(),
    );
    report::explain(&history, &found, &logs);
    print!("{}", report.table());
    if args.json {
        println!("{}", report.json());
    }
    Ok(())
}

/// `work`, unless a SIGINT or SIGTERM comes first (then `Err`, and `work`
/// is dropped, taking down what it had made).
async fn until_interrupted<T>(work: impl Future<Output = T>) -> anyhow::Result<T> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        done = work => Ok(done),
        _ = int.recv() => Err(anyhow::anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow::anyhow!("terminated")),
    }
}

/// Copies every host's log where it outlives the run, for a run with
/// violations to be read.
fn keep_logs(rig: &Rig, seed: u64) {
    let dir = std::env::temp_dir().join(format!("garrison-bench-chaos-logs-{seed}"));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    for (n, g) in rig.garrisons.iter().enumerate() {
        let _ = std::fs::copy(&g.log, dir.join(format!("host-{n}.log")));
    }
    progress(&format!(
        "violations found: every host's log is kept in {}",
        dir.display()
    ));
}

fn which(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// The run itself: ready, faults, drain, settle; its whole history.
async fn drive(
    rig: &mut Rig,
    args: &ChaosArgs,
    seed: u64,
    clock_steps: bool,
) -> anyhow::Result<History> {
    let ttl_ms = (args.claim_ttl_secs * 1000) as i64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(0..args.hosts).all(|n| rig.ready(n)) {
        for (n, g) in rig.garrisons.iter_mut().enumerate() {
            if let Some(status) = g.exited() {
                bail!(
                    "host {n}'s garrison exited at start ({status}):\n{}",
                    g.log_tail(30)
                );
            }
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = rig.garrisons.iter().map(|g| g.log_tail(15)).collect();
            bail!(
                "the garrisons were not ready within 120 s; their logs end:\n{}",
                logs.join("\n---\n")
            );
        }
        tokio::time::sleep(LOOK).await;
    }
    let chaos = Duration::from_secs_f64(args.minutes * 60.0);
    progress(&format!(
        "{} hosts ready; {:.1} min of faults over {} sessions",
        args.hosts, args.minutes, args.sessions
    ));
    let mut workload = Workload::new(seed, &rig.outpost, args.sessions, chaos / 2);
    let mut injector = Injector::new(strict_faults());
    let mut exits: Vec<Vec<Exit>> = vec![Vec::new(); args.hosts];
    let limits = Limits {
        hosts: args.hosts,
        claim_ttl_ms: ttl_ms as u64,
        max_active: 3,
        start_chance: 0.6,
        clock_steps,
    };
    let begun = Instant::now();
    let mut tick = 0u64;
    while begun.elapsed() < chaos {
        look(rig, &mut workload, &injector, &mut exits, begun)?;
        injector.heal(rig, false).await?;
        if begun.elapsed() >= TICK * tick as u32 {
            if let Some(plan) = decide(seed, tick, &injector.active(), &limits) {
                injector.start(rig, plan).await?;
            }
            tick += 1;
        }
        tokio::time::sleep(LOOK).await;
    }
    injector.heal(rig, true).await?;
    let healed = now_ms();
    progress("faults over; draining");
    let drain = Instant::now() + Duration::from_secs(args.drain_secs);
    while !workload.finished(&rig.emu) && Instant::now() < drain {
        look(rig, &mut workload, &injector, &mut exits, begun)?;
        tokio::time::sleep(LOOK).await;
    }
    // Every host gets its chance to be ready again after the last heal.
    let settle = Instant::now() + READY_WITHIN;
    while !(0..args.hosts).all(|n| rig.ready(n)) && Instant::now() < settle {
        look(rig, &mut workload, &injector, &mut exits, begun)?;
        tokio::time::sleep(LOOK).await;
    }
    progress("looking for leftovers");
    let leftovers = leftovers_settled(rig, Duration::from_secs(60)).await?;
    let end_ms = now_ms().max(healed);
    let hosts = (0..args.hosts)
        .map(|n| HostHistory {
            acceptor: format!("host-{n}"),
            addr: rig.hosts.addr(n).to_string(),
            readiness: rig.readiness[n].lock().expect("readiness lock").clone(),
            exits: std::mem::take(&mut exits[n]),
        })
        .collect();
    let sessions = workload.histories(&rig.emu);
    let state_dirs: Vec<_> = rig.garrisons.iter().map(|g| g.state_dir.clone()).collect();
    let ids: Vec<String> = sessions.iter().map(|s| s.view.session_id.clone()).collect();
    Ok(History {
        final_status_unknown: kept::final_status_unknown(&state_dirs, &ids),
        claim_ttl_ms: ttl_ms,
        renew_margin_ms: renew_margin(Some(ttl_ms), &Policy::default()),
        ready_within_ms: READY_WITHIN.as_millis() as i64,
        end_ms,
        faults: injector.records,
        hosts,
        sessions,
        leftovers,
    })
}

/// One look: exits the bench did not cause (recorded, then restarted, so
/// the run goes on), and the workload's next steps.
fn look(
    rig: &mut Rig,
    workload: &mut Workload,
    injector: &Injector,
    exits: &mut [Vec<Exit>],
    begun: Instant,
) -> anyhow::Result<()> {
    for (n, g) in rig.garrisons.iter_mut().enumerate() {
        if injector.killed(n) {
            continue;
        }
        if let Some(status) = g.exited() {
            let what = format!("{status}; its log ends:\n{}", g.log_tail(20));
            progress(&format!("host {n}'s garrison exited unasked: {status}"));
            exits[n].push(Exit {
                at_ms: now_ms(),
                what,
            });
            g.restart()?;
        }
    }
    workload.drive(&rig.emu, begun.elapsed())
}

/// What ended sessions left: sandboxes and snapshot files on each host,
/// objects in the bucket; given `patience` to be cleaned up.
async fn leftovers_settled(rig: &Rig, patience: Duration) -> anyhow::Result<Vec<Leftover>> {
    let deadline = Instant::now() + patience;
    loop {
        let mut left = Vec::new();
        for (n, g) in rig.garrisons.iter().enumerate() {
            for path in g.sandboxes().into_iter().chain(g.snapshot_files()) {
                left.push(Leftover {
                    host: Some(n),
                    path,
                });
            }
        }
        for key in rig.store.keys().await? {
            left.push(Leftover {
                host: None,
                path: key,
            });
        }
        if left.is_empty() || Instant::now() > deadline {
            return Ok(left);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
