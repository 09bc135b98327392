//! `garrison bench scale`: one Garrison holding many sessions at once.
//!
//! The emulator runs in this process on loopback; Garrison runs as a child
//! process (`garrison serve` with the host backend, each remote the static
//! `devin-remote-sim`), so its own CPU time and memory can be read from
//! `/proc` apart from the emulator's and the remotes'. The phases:
//!
//! 1. ramp: `--sessions` sessions that stay running are enqueued
//!    `--pace-ms` apart; the bench waits until every remote connected;
//! 2. idle: for `--hold-secs` nothing happens but the claims' renewals;
//!    Garrison's CPU time, peak memory, the fleet API requests the emulator
//!    served and the state-store writes Garrison counted are measured;
//! 3. health: every remote still connected, no claim expired, every claim
//!    renewed as often as its lifetime needs;
//! 4. new sessions: `--probes` short sessions enqueued one by one while the
//!    others run, timed from enqueue to remote started and connected;
//! 5. wind-down: every session terminated at once, until every claim is
//!    released; then Garrison is stopped.

mod child;
mod proc;
mod report;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::Args;
use emulator::{Emulator, EmulatorConfig, NewSession, Script, SessionView, Then};
use fleet::{Platform, SessionStatus};
use orchestrator::{Policy, Store, renew_margin};
use rand::Rng;

use crate::report::Summary;
pub(crate) use child::kill_leftovers;
use child::{Garrison, HANG_GUARD};
use report::{Health, Idle, Ramp, ScaleReport};

/// Options of `garrison bench scale`.
#[derive(Args, Debug)]
pub struct ScaleArgs {
    /// Sessions held at once.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
    /// How long every session idles while Garrison's use is measured.
    #[arg(long, default_value_t = 600)]
    hold_secs: u64,
    /// Mean gap between the ramp's enqueues, in milliseconds (each gap is
    /// drawn from 0.5x..1.5x of it).
    #[arg(long, default_value_t = 5)]
    pace_ms: u64,
    /// New sessions timed while the others run.
    #[arg(long, default_value_t = 50)]
    probes: usize,
    /// Gap between two new sessions, in milliseconds.
    #[arg(long, default_value_t = 250)]
    probe_gap_ms: u64,
    /// Lifetime of the emulator's claims (the fleet API's is about 300 s).
    #[arg(long, default_value_t = 300)]
    claim_ttl_secs: u64,
    /// Also print the figures as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

/// How often the bench looks at the emulator while it waits.
const LOOK: Duration = Duration::from_millis(250);

pub(crate) async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    if args.sessions == 0 {
        bail!("--sessions must be at least 1");
    }
    if args.claim_ttl_secs < 10 {
        bail!("--claim-ttl-secs must be at least 10");
    }
    let sim = emulator::locate_remote_sim().context(
        "devin-remote-sim not found next to this binary (or in $GARRISON_REMOTE_SIM); \
         build it with scripts/setup, which puts the static one in target/release",
    )?;
    let claim_ttl = Duration::from_secs(args.claim_ttl_secs);
    let emu = Emulator::start(EmulatorConfig {
        claim_ttl,
        status_lag: Duration::from_millis(100),
        linger: Duration::from_secs(1),
        remote_binary: Some(sim),
        ..Default::default()
    })
    .await?;
    let tmp = tempfile::Builder::new()
        .prefix("garrison-bench-scale-")
        .tempdir()
        .context("creating a temporary state directory")?;
    let outpost = emu.create_outpost("bench-scale", Platform::Linux);
    let mut garrison = Garrison::start(&emu, &outpost, tmp.path(), args.sessions + args.probes)?;
    let measured = measure(&emu, &outpost, &mut garrison, &args).await;
    garrison.stop().await;
    emu.shutdown().await;
    // The state directory goes with this function: a failure says what
    // Garrison logged last.
    let report = measured
        .map_err(|e| e.context(format!("garrison's log ends:\n{}", garrison.log_tail())))?;
    print!("{}", report.table());
    if args.json {
        println!("{}", report.json());
    }
    Ok(())
}

async fn measure(
    emu: &Emulator,
    outpost: &str,
    garrison: &mut Garrison,
    args: &ScaleArgs,
) -> anyhow::Result<ScaleReport> {
    let http = reqwest::Client::new();
    garrison.wait_ready(&http).await?;
    let store = garrison.store()?;
    progress("warming up: one session downloads the remote into Garrison's cache");
    let warm_up = enqueue(emu, outpost, Then::End)?;
    wait_for(emu, &[warm_up], finished, HANG_GUARD, garrison).await?;

    progress(&format!(
        "ramp: {} sessions, one every ~{} ms",
        args.sessions, args.pace_ms
    ));
    let ramp_started = Instant::now();
    let mut ids = Vec::with_capacity(args.sessions);
    let pace = Duration::from_millis(args.pace_ms);
    for _ in 0..args.sessions {
        ids.push(enqueue(emu, outpost, Then::Wait)?);
        let jitter = rand::rng().random_range(0.5..1.5);
        tokio::time::sleep(pace.mul_f64(jitter)).await;
    }
    let ramp_guard = HANG_GUARD + Duration::from_millis(100) * args.sessions as u32;
    wait_for(emu, &ids, |v| v.connected, ramp_guard, garrison).await?;
    let ramp_duration = ramp_started.elapsed();
    let (ramp_e2c, ramp_overhead) = timings(emu, &store, &ids)?;

    progress(&format!(
        "idle: {} s with every session running",
        args.hold_secs
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = idle(emu, garrison, &http, Duration::from_secs(args.hold_secs)).await?;

    let renew_every = renewal_interval(claim_ttl_ms(args));
    let health = health(
        emu,
        &ids,
        Duration::from_secs(args.claim_ttl_secs),
        args.hold_secs * 1000 / renew_every.as_millis().max(1) as u64,
    );
    progress("listing every session through the admin API");
    let (admin_listing, admin_listing_bytes) = admin_listing(&http, garrison.admin).await?;

    progress(&format!(
        "new sessions: {} while {} run",
        args.probes, args.sessions
    ));
    let mut probes = Vec::with_capacity(args.probes);
    for _ in 0..args.probes {
        probes.push(enqueue(emu, outpost, Then::End)?);
        tokio::time::sleep(Duration::from_millis(args.probe_gap_ms)).await;
    }
    wait_for(emu, &probes, finished, HANG_GUARD, garrison).await?;
    let (probe_e2c, probe_overhead) = timings(emu, &store, &probes)?;

    progress("winding every session down at once");
    let winding = Instant::now();
    for id in &ids {
        emu.terminate(id)?;
    }
    wait_for(emu, &ids, finished, ramp_guard, garrison).await?;
    let wind_down = winding.elapsed();

    Ok(ScaleReport {
        sessions: args.sessions,
        claim_ttl: Duration::from_secs(args.claim_ttl_secs),
        renew_every,
        ramp: Ramp {
            enqueue_to_connected: ramp_e2c,
            overhead: ramp_overhead,
            duration: ramp_duration,
        },
        idle,
        health,
        probe_enqueue_to_connected: probe_e2c,
        probe_overhead,
        admin_listing,
        admin_listing_bytes,
        wind_down,
    })
}

fn claim_ttl_ms(args: &ScaleArgs) -> i64 {
    (args.claim_ttl_secs * 1000) as i64
}

/// How often Garrison renews a claim of this lifetime.
fn renewal_interval(ttl_ms: i64) -> Duration {
    let margin = renew_margin(Some(ttl_ms), &Policy::default());
    Duration::from_millis((ttl_ms - margin).max(0) as u64)
}

/// Progress goes to stderr so stdout holds only the figures.
fn progress(message: &str) {
    eprintln!("bench scale: {message}");
}

fn enqueue(emu: &Emulator, outpost: &str, then: Then) -> anyhow::Result<String> {
    emu.create_session(NewSession {
        outpost_id: outpost.to_owned(),
        script: Script {
            steps: Vec::new(),
            then,
        },
        ..Default::default()
    })
}

/// Terminated, and released by its last holder.
fn finished(view: &SessionView) -> bool {
    let claims = view.events("claimed").count();
    view.session_status == SessionStatus::Terminated
        && claims > 0
        && view.events("released").count() >= claims
}

/// Waits until `done` holds for every session in `ids`.
async fn wait_for(
    emu: &Emulator,
    ids: &[String],
    done: impl Fn(&SessionView) -> bool,
    guard: Duration,
    garrison: &mut Garrison,
) -> anyhow::Result<()> {
    let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = Instant::now() + guard;
    loop {
        let pending = emu
            .sessions()
            .iter()
            .filter(|v| wanted.contains(v.session_id.as_str()) && !done(v))
            .count();
        if pending == 0 {
            return Ok(());
        }
        garrison.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "{pending} of {} sessions were not there within {guard:?}",
                ids.len()
            );
        }
        tokio::time::sleep(LOOK).await;
    }
}

/// Enqueued -> connected (the emulator's clock) and enqueued -> remote
/// started (Garrison's record); both are this host's wall clock.
fn timings(emu: &Emulator, store: &Store, ids: &[String]) -> anyhow::Result<(Summary, Summary)> {
    let views: HashMap<String, SessionView> = emu
        .sessions()
        .into_iter()
        .map(|v| (v.session_id.clone(), v))
        .collect();
    let mut e2c = Vec::with_capacity(ids.len());
    let mut overhead = Vec::with_capacity(ids.len());
    for id in ids {
        let view = views
            .get(id)
            .ok_or_else(|| anyhow!("session {id} vanished"))?;
        let emu_at = |kind: &str| view.events(kind).next().map(|e| e.at_ms);
        let started = store
            .events(&fleet::SessionId::new(id.as_str())?, 0)?
            .into_iter()
            .find(|e| e.kind == "remote_started")
            .map(|e| e.at);
        if let Some(enqueued) = emu_at("enqueued") {
            if let Some(connected) = emu_at("connected") {
                e2c.push((connected - enqueued) as f64);
            }
            if let Some(started) = started {
                overhead.push((started - enqueued) as f64);
            }
        }
    }
    Ok((Summary::of(&e2c), Summary::of(&overhead)))
}

/// Garrison's use over `window` with every session running.
async fn idle(
    emu: &Emulator,
    garrison: &mut Garrison,
    http: &reqwest::Client,
    window: Duration,
) -> anyhow::Result<Idle> {
    let requests_before = fleet_requests(emu);
    let writes_before = store_writes(http, garrison.admin).await?;
    let before = garrison.usage()?;
    let started = Instant::now();
    let mut rss_kib_max = before.rss_kib;
    while started.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(1).min(window)).await;
        rss_kib_max = rss_kib_max.max(garrison.usage()?.rss_kib);
    }
    let after = garrison.usage()?;
    let elapsed = started.elapsed();
    Ok(Idle {
        window: elapsed,
        cpu: after.cpu.saturating_sub(before.cpu),
        rss_kib_max: rss_kib_max.max(after.rss_kib),
        fleet_requests: fleet_requests(emu) - requests_before,
        store_writes: store_writes(http, garrison.admin).await? - writes_before,
    })
}

fn health(emu: &Emulator, ids: &[String], ttl: Duration, renewals_expected: u64) -> Health {
    let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let views: Vec<SessionView> = emu
        .sessions()
        .into_iter()
        .filter(|v| wanted.contains(v.session_id.as_str()))
        .collect();
    let now = chrono::Utc::now().timestamp_millis();
    let ttl_ms = ttl.as_millis() as i64;
    Health {
        connected_at_end: views.iter().filter(|v| v.connected).count(),
        missed_deadlines: views
            .iter()
            .map(|v| {
                let claims: Vec<i64> = v
                    .transcript
                    .iter()
                    .filter(|e| e.kind == "claimed" || e.kind == "renewed")
                    .map(|e| e.at_ms)
                    .collect();
                v.events("claim_expired").count() + missed_deadlines(&claims, ttl_ms, now)
            })
            .sum(),
        reconnected: views.iter().filter(|v| v.connections > 1).count(),
        renewals_min: views
            .iter()
            .map(|v| v.events("renewed").count() as u64)
            .min()
            .unwrap_or(0),
        renewals_expected,
    }
}

/// Deadlines a claim passed unrenewed: a gap longer than the claim's
/// lifetime between two claims or renewals, or since the last one. (The
/// fleet API leaves a running session's expired claim with its worker, so
/// the server records no expiry for it: the gap is the evidence.)
fn missed_deadlines(claims_at: &[i64], ttl_ms: i64, now: i64) -> usize {
    let gaps = claims_at
        .windows(2)
        .filter(|pair| pair[1] - pair[0] > ttl_ms)
        .count();
    let overdue = claims_at.last().is_some_and(|last| now - last > ttl_ms);
    gaps + usize::from(overdue)
}

/// `GET /api/sessions` a few times, as a dashboard would.
async fn admin_listing(
    http: &reqwest::Client,
    admin: SocketAddr,
) -> anyhow::Result<(Summary, usize)> {
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let body = http
            .get(format!("http://{admin}/api/sessions"))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        bytes = body.len();
    }
    Ok((Summary::of(&times), bytes))
}

/// Fleet API requests the emulator served (not its admin routes, the
/// static distribution or the gateway).
fn fleet_requests(emu: &Emulator) -> u64 {
    emu.request_counts()
        .iter()
        .filter(|(key, _)| {
            key.split_once(' ')
                .is_some_and(|(_, path)| path.starts_with("/opbeta/"))
        })
        .map(|(_, n)| n)
        .sum()
}

/// `garrison_store_writes_total` from Garrison's metrics.
async fn store_writes(http: &reqwest::Client, admin: SocketAddr) -> anyhow::Result<u64> {
    let text = http
        .get(format!("http://{admin}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    metric(&text, "garrison_store_writes_total")
        .with_context(|| "garrison_store_writes_total missing from /metrics".to_owned())
}

fn metric(exposition: &str, name: &str) -> Option<u64> {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_writes_are_read_from_the_exposition() {
        let text = "# HELP garrison_store_writes_total x\n# TYPE garrison_store_writes_total counter\ngarrison_store_writes_total 1234\ngarrison_store_writes_totally 9\n";
        assert_eq!(metric(text, "garrison_store_writes_total"), Some(1234));
        assert_eq!(metric(text, "garrison_nothing"), None);
    }

    #[test]
    fn a_gap_longer_than_the_claim_is_a_missed_deadline() {
        assert_eq!(missed_deadlines(&[0, 240, 480], 300, 500), 0);
        assert_eq!(missed_deadlines(&[0, 301, 500], 300, 600), 1);
        assert_eq!(missed_deadlines(&[0, 240], 300, 541), 1, "overdue now");
        assert_eq!(missed_deadlines(&[], 300, 1_000), 0);
    }

    #[test]
    fn a_five_minute_claim_is_renewed_every_four() {
        assert_eq!(renewal_interval(300_000), Duration::from_secs(240));
        // A short claim is renewed at half its life.
        assert_eq!(renewal_interval(20_000), Duration::from_secs(10));
    }
}
