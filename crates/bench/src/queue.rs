//! `garrison bench queue`: enqueue-to-connected latency of the watch-driven
//! loop against a polling loop, fleet API requests per session, and list
//! calls while idle.
//!
//! Everything runs in this process: the emulator, and `serve` with the host
//! backend (remotes are the static `devin-remote-sim`, started through this
//! binary's shim). Each phase gets its own outpost and state directory, so
//! the phases share nothing but the emulator. Both clocks are this host's
//! wall clock, so emulator and Garrison timestamps compare directly.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::Args;
use emulator::{Emulator, EmulatorConfig, NewSession, Script, SessionView, Then};
use fleet::stats::route;
use fleet::{Platform, RequestStats, Secret, SessionStatus};
use orchestrator::Serving;
use orchestrator::settings::{OutpostConfig, QueueMode, ServeConfig};
use rand::Rng;
use sandbox::plugin::BackendPlugin;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::report::{IdleReport, PhaseReport, Report, Summary};

/// Options of `garrison bench queue`.
#[derive(Args, Debug)]
pub struct QueueArgs {
    /// Sessions measured with Garrison's watch-driven loop.
    #[arg(long, default_value_t = 200)]
    sessions: usize,
    /// Sessions measured with the polling loop (default: --sessions).
    #[arg(long)]
    poll_sessions: Option<usize>,
    /// Mean gap between enqueues in the watch phase, in milliseconds (each
    /// gap is drawn from 0.5x..1.5x of it).
    #[arg(long, default_value_t = 100)]
    pace_ms: u64,
    /// Interval of the polling loop, in seconds.
    #[arg(long, default_value_t = 3.0)]
    poll_interval_secs: f64,
    /// The polling phase's sessions are enqueued over this many seconds.
    #[arg(long, default_value_t = 60)]
    poll_spread_secs: u64,
    /// Idle window after the watch phase in which list calls are counted.
    #[arg(long, default_value_t = 30)]
    idle_secs: u64,
    /// Sessions one Garrison runs at once.
    #[arg(long, default_value_t = 32)]
    max_concurrent: usize,
    /// Also print the figures as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

/// Short, so a finished session frees its slot quickly; the protocol's real
/// lags are seconds, which would only lengthen the run, not the figures.
const STATUS_LAG: Duration = Duration::from_millis(100);
const LINGER: Duration = Duration::from_secs(1);
/// The production default: the idle figure is about the real setting.
const RELIST_INTERVAL: Duration = orchestrator::settings::DEFAULT_RELIST_INTERVAL;
/// Bounds each wait; a healthy run needs a fraction of it.
const HANG_GUARD: Duration = Duration::from_secs(120);

pub(crate) async fn run(args: QueueArgs) -> anyhow::Result<()> {
    if args.sessions == 0 || args.poll_sessions == Some(0) {
        bail!("--sessions and --poll-sessions must be at least 1");
    }
    if !(args.poll_interval_secs > 0.0 && args.poll_interval_secs <= 600.0) {
        bail!("--poll-interval-secs must be in (0, 600]");
    }
    let sim = emulator::locate_remote_sim().context(
        "devin-remote-sim not found next to this binary (or in $GARRISON_REMOTE_SIM); \
         build it with scripts/setup, which puts the static one in target/release",
    )?;
    let shim_exe = std::env::current_exe().context("locating this binary for the shim")?;
    let emu = Emulator::start(EmulatorConfig {
        status_lag: STATUS_LAG,
        linger: LINGER,
        remote_binary: Some(sim),
        ..Default::default()
    })
    .await?;
    let tmp = tempfile::Builder::new()
        .prefix("garrison-bench-")
        .tempdir()
        .context("creating a temporary state directory")?;

    let watch = Phase::start(
        &emu,
        "watch",
        tmp.path(),
        QueueMode::Watch,
        &args,
        &shim_exe,
    )
    .await?;
    let pace = Duration::from_millis(args.pace_ms);
    progress(&format!(
        "watch phase: {} sessions, one every ~{} ms",
        args.sessions, args.pace_ms
    ));
    let watch_report = watch.measure(&emu, args.sessions, pace).await?;
    progress(&format!(
        "idle window: {} s with the watch open",
        args.idle_secs
    ));
    let idle = watch.idle(&emu, Duration::from_secs(args.idle_secs)).await;
    watch.stop().await;
    progress("timing the start steps one by one");
    let start_steps = crate::probe::start_steps(&emu, &tmp.path().join("probe"), &shim_exe).await?;

    let poll_interval = Duration::from_secs_f64(args.poll_interval_secs);
    let poll_sessions = args.poll_sessions.unwrap_or(args.sessions);
    let poll_pace = Duration::from_secs(args.poll_spread_secs) / poll_sessions as u32;
    let poll = Phase::start(
        &emu,
        "poll",
        tmp.path(),
        QueueMode::Poll(poll_interval),
        &args,
        &shim_exe,
    )
    .await?;
    progress(&format!(
        "poll phase: {poll_sessions} sessions over ~{} s, listing every {} s",
        args.poll_spread_secs, args.poll_interval_secs
    ));
    let poll_report = poll.measure(&emu, poll_sessions, poll_pace).await?;
    poll.stop().await;
    emu.shutdown().await;

    let report = Report {
        watch: watch_report,
        poll: poll_report,
        poll_interval,
        idle,
        start_steps,
    };
    print!("{}", report.table());
    if args.json {
        println!("{}", report.json());
    }
    Ok(())
}

/// Progress goes to stderr so stdout holds only the figures.
fn progress(message: &str) {
    eprintln!("bench queue: {message}");
}

/// One `serve` on its own outpost and state directory.
struct Phase {
    outpost: String,
    serving: Arc<Serving>,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Phase {
    /// Starts `serve`, waits for its first list, and serves one warm-up
    /// session (which downloads the remote into the cache, as a long-running
    /// Garrison would have long before) outside the figures.
    async fn start(
        emu: &Emulator,
        name: &str,
        root: &Path,
        mode: QueueMode,
        args: &QueueArgs,
        shim_exe: &Path,
    ) -> anyhow::Result<Phase> {
        let outpost = emu.create_outpost(&format!("bench-{name}"), Platform::Linux);
        let config = serve_config(emu, root.join(name), &outpost, mode, args.max_concurrent);
        let serving = orchestrator::prepare(&config)?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(orchestrator::run_prepared(
            config,
            serving.clone(),
            shim_exe.to_owned(),
            stop.clone(),
        ));
        let phase = Phase {
            outpost,
            serving,
            stop,
            task,
        };
        let view = phase.serving.views[0].clone();
        wait_until("the first list of the queue", || view.is_synced()).await?;
        let warm_up = phase.enqueue(emu)?;
        phase.wait_done(emu, &[warm_up]).await?;
        Ok(phase)
    }

    fn enqueue(&self, emu: &Emulator) -> anyhow::Result<String> {
        emu.create_session(NewSession {
            outpost_id: self.outpost.clone(),
            script: Script {
                steps: Vec::new(),
                then: Then::End,
            },
            ..Default::default()
        })
    }

    /// Enqueues `n` sessions about `pace` apart, waits until every one is
    /// terminated and released, and measures them.
    async fn measure(
        &self,
        emu: &Emulator,
        n: usize,
        pace: Duration,
    ) -> anyhow::Result<PhaseReport> {
        let server_before = fleet_requests(emu);
        let client_before = self.serving.client.stats();
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            ids.push(self.enqueue(emu)?);
            // Jittered so arrivals do not lock step with a poll interval.
            let jitter = rand::rng().random_range(0.5..1.5);
            tokio::time::sleep(pace.mul_f64(jitter)).await;
        }
        self.wait_done(emu, &ids).await?;
        let mut report = self.timings(emu, &ids)?;
        report.fleet_requests = fleet_requests(emu) - server_before;
        report.client_routes = route_diff(&client_before, &self.serving.client.stats());
        Ok(report)
    }

    /// Waits until every session is terminated and its last claim released.
    async fn wait_done(&self, emu: &Emulator, ids: &[String]) -> anyhow::Result<()> {
        let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let pending = emu
                .sessions()
                .iter()
                .filter(|v| wanted.contains(v.session_id.as_str()) && !finished(v))
                .count();
            if pending == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "{pending} of {} sessions did not finish within {HANG_GUARD:?}",
                    ids.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Per-session intervals from the emulator's transcript (enqueued,
    /// claimed, connected) and Garrison's own events (claimed, sandbox
    /// created, remote started).
    fn timings(&self, emu: &Emulator, ids: &[String]) -> anyhow::Result<PhaseReport> {
        let views: HashMap<String, SessionView> = emu
            .sessions()
            .into_iter()
            .map(|v| (v.session_id.clone(), v))
            .collect();
        let mut series: [Vec<f64>; 6] = Default::default();
        for id in ids {
            let view = views
                .get(id)
                .ok_or_else(|| anyhow!("session {id} vanished"))?;
            let emu_at = |kind: &str| view.events(kind).next().map(|e| e.at_ms);
            let ours: BTreeMap<String, i64> = self
                .serving
                .store
                .events(&fleet::SessionId::new(id.as_str())?, 0)?
                .into_iter()
                .rev() // the first of each kind wins
                .map(|e| (e.kind, e.at))
                .collect();
            let ours_at = |kind: &str| ours.get(kind).copied();
            let enqueued = emu_at("enqueued");
            let pairs = [
                (enqueued, emu_at("connected")),
                (enqueued, ours_at("remote_started")),
                (enqueued, emu_at("claimed")),
                (ours_at("claimed"), ours_at("sandbox_created")),
                (ours_at("sandbox_created"), ours_at("remote_started")),
                (ours_at("remote_started"), emu_at("connected")),
            ];
            for (samples, pair) in series.iter_mut().zip(pairs) {
                if let (Some(from), Some(to)) = pair {
                    samples.push((to - from) as f64);
                }
            }
        }
        let [e2c, overhead, claim, to_sandbox, to_started, startup] =
            series.map(|s| Summary::of(&s));
        Ok(PhaseReport {
            sessions: ids.len(),
            enqueue_to_connected: e2c,
            overhead,
            discover_and_claim: claim,
            claim_to_sandbox: to_sandbox,
            sandbox_to_started: to_started,
            remote_startup: startup,
            ..Default::default()
        })
    }

    /// Counts list calls over `window` with nothing queued.
    async fn idle(&self, emu: &Emulator, window: Duration) -> IdleReport {
        // Let the last rows linger out, so the window holds no queue events.
        tokio::time::sleep(LINGER * 2).await;
        let client_before = self.serving.client.stats();
        let server_before = server_count(emu, "GET /opbeta/outposts/devins");
        tokio::time::sleep(window).await;
        let routes = route_diff(&client_before, &self.serving.client.stats());
        IdleReport {
            window,
            relist_interval: RELIST_INTERVAL,
            list_calls: routes.get(route::LIST).copied().unwrap_or(0),
            watch_opens: routes.get(route::WATCH).copied().unwrap_or(0),
            server_list_or_watch: server_count(emu, "GET /opbeta/outposts/devins") - server_before,
        }
    }

    /// Stops `serve`; every session is over, so nothing is left running.
    async fn stop(self) {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => progress(&format!("serve ended with an error: {e:#}")),
            Err(e) => progress(&format!("serve panicked: {e}")),
        }
    }
}

fn serve_config(
    emu: &Emulator,
    state_dir: PathBuf,
    outpost: &str,
    queue_mode: QueueMode,
    max_concurrent: usize,
) -> ServeConfig {
    ServeConfig {
        gateway_url: None,
        api_url: emu.base_url(),
        token: Secret::new(emu.account_token()),
        acceptor_id: None,
        static_base_url: emu.static_base_url(),
        snapshot_dir: state_dir.join("snapshots"),
        snapshot_store: None,
        state_dir,
        state_dir_min_free_bytes: orchestrator::settings::DEFAULT_STATE_DIR_MIN_FREE_MB << 20,
        snapshot_retention: None,
        relist_interval: RELIST_INTERVAL,
        queue_mode,
        drain: false,
        policy: Default::default(),
        outposts: vec![OutpostConfig {
            outpost_id: outpost.to_owned(),
            backend: host::PLUGIN.name(),
            max_concurrent,
            resources: Default::default(),
            image: None,
            platform: Platform::Linux,
            repos: Default::default(),
        }],
        admin_listen: None,
        backends: std::collections::BTreeMap::from([(
            host::PLUGIN.name(),
            host::PLUGIN
                .configure(&common::settings::MapSource::default())
                .expect("the host backend has no settings to refuse"),
        )]),
    }
}

/// Terminated, and released by its last holder.
fn finished(view: &SessionView) -> bool {
    let claims = view.events("claimed").count();
    view.session_status == SessionStatus::Terminated
        && claims > 0
        && view.events("released").count() >= claims
}

/// Fleet API requests the emulator served: its admin routes, the static
/// distribution and the gateway are not the fleet API.
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

fn server_count(emu: &Emulator, key: &str) -> u64 {
    emu.request_counts().get(key).copied().unwrap_or(0)
}

/// Requests per route sent between two snapshots of the client's counters.
fn route_diff(before: &RequestStats, after: &RequestStats) -> BTreeMap<String, u64> {
    after
        .routes
        .iter()
        .map(|(route, stats)| {
            let earlier = before.routes.get(route).map_or(0, |s| s.requests);
            (route.to_string(), stats.requests - earlier)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

async fn wait_until(what: &str, check: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + HANG_GUARD;
    while !check() {
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
