//! `garrison demo`: Garrison serving a few scripted Devin sessions against
//! a local emulator of Devin, in one process, for someone with no Devin
//! account. It picks the best backend this machine supports and says why,
//! prints the dashboard's address, shows each session's progress, and ends
//! with a summary and PASS/FAIL per expectation (exit 1 if one failed).
//!
//! Its state lives in its own directory (`demo` under the default state
//! directory), so a real deployment's database is never touched. However
//! it ends (the summary, Ctrl-C, SIGTERM, an error of Garrison's), it
//! stops Garrison and then removes every sandbox left in that directory.

mod backend;
mod follow;
mod scenario;
mod stop;
mod summary;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use emulator::{Emulator, EmulatorConfig};
use fleet::{Platform, Secret};
use orchestrator::Serving;
use orchestrator::settings::{BackendSource, HostEnv};
use orchestrator::settings::{OutpostConfig, QueueMode, ServeConfig};
use sandbox::Resources;
use sandbox::plugin::{BackendPlugin, ConfiguredBackend, Placement};
use tokio_util::sync::CancellationToken;

use follow::Ended;
use scenario::{Expectation, Role, Tracked};

/// Flags of `garrison demo`.
#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Address of the admin listener (the dashboard); when it is taken, a
    /// free port on the same address is used instead
    #[arg(long, default_value = "127.0.0.1:9180", value_name = "ADDR")]
    listen: SocketAddr,
    /// Sandbox backend: local or host
    /// [default: local when this machine supports it, else host]
    #[arg(long, value_name = "KIND", value_parser = parse_backend)]
    backend: Option<&'static dyn BackendPlugin>,
    /// The demo's state directory
    /// [default: `demo` under the default state directory]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// After the scripted sessions, keep serving (and the dashboard up)
    /// until Ctrl-C
    #[arg(long)]
    keep_running: bool,
}

fn parse_backend(text: &str) -> Result<&'static dyn BackendPlugin, String> {
    match crate::backends::find(text) {
        Some(backend) if matches!(backend.name(), "local" | "host") => Ok(backend),
        Some(other) => Err(format!(
            "the demo runs on the local or host backend, not {}",
            other.name()
        )),
        None => Err(format!(
            "unknown backend {text:?} (expected {})",
            crate::backends::names()
        )),
    }
}

/// Short, so the demo moves at a watchable pace rather than the protocol's
/// real seconds-long lags.
const STATUS_LAG: Duration = Duration::from_millis(300);
const LINGER: Duration = Duration::from_secs(2);
/// Bounds the scripted part; a healthy run needs a small fraction of it
/// (the first container start on a new machine is the slow part).
const HANG_GUARD: Duration = Duration::from_secs(300);
/// After Ctrl-C, how long the demo waits for its sessions to wind down
/// before it removes their sandboxes itself.
const WIND_DOWN: Duration = Duration::from_secs(30);

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    // The progress table is the output; Garrison's info logs would drown
    // it. RUST_LOG still turns them on.
    crate::logging::init_with_default(crate::logging::LogFormat::Text, "warn");
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => default_state_dir()?,
    };
    std::fs::create_dir_all(&state_dir).with_context(|| {
        format!(
            "creating the demo's state directory {}",
            state_dir.display()
        )
    })?;
    println!(
        "garrison demo: Devin's side is emulated on this machine, so no Devin account is needed"
    );
    println!("state: {}", state_dir.display());
    // From here on, Ctrl-C ends the demo with its sandboxes removed.
    let stops = stop::on_signals().context("listening for Ctrl-C and SIGTERM")?;

    // A stop signal does not cut an image build short: mmdebstrap killed
    // mid-build leaves its mounts in the work directory. Ctrl-C at a
    // terminal reaches mmdebstrap too, which stops and cleans up by itself;
    // a SIGTERM to the demo alone lets the build finish first.
    let chosen = choose_backend(args.backend, &state_dir).await;
    if stops.interrupt.is_cancelled() {
        println!("interrupted before the demo started");
        std::process::exit(1);
    }
    let (choice, configured) = chosen?;
    println!("{}", choice.message);
    let shim_exe = std::env::current_exe().context("locating this binary for the shim")?;
    stop::remove_sandboxes(
        configured.as_ref(),
        &state_dir,
        &shim_exe,
        "left by an earlier, interrupted demo",
    )
    .await;

    let sim = emulator::locate_remote_sim().context(
        "devin-remote-sim not found next to this binary (or in $GARRISON_REMOTE_SIM); \
         scripts/setup builds it (scripts/demo runs it first)",
    )?;
    let emu = Emulator::start(EmulatorConfig {
        status_lag: STATUS_LAG,
        linger: LINGER,
        remote_binary: Some(sim),
        ..Default::default()
    })
    .await?;
    let outpost = emu.create_outpost("demo", Platform::Linux);

    let listen = free_listen(args.listen);
    let config = serve_config(
        &emu,
        &state_dir,
        &outpost,
        (choice.backend.name(), configured.clone()),
        listen,
    );
    let serving = orchestrator::prepare(&config)?;
    let serve_stop = CancellationToken::new();
    let serve_done = CancellationToken::new();
    let serve_task = tokio::spawn({
        let run = orchestrator::run_prepared(
            config.clone(),
            serving.clone(),
            shim_exe.clone(),
            serve_stop.clone(),
        );
        let done = serve_done.clone();
        async move {
            let ended = run.await;
            done.cancel();
            ended
        }
    });
    println!("open http://{listen}/ to watch (the dashboard updates itself)");

    let demo = Demo {
        emu: &emu,
        serving: &serving,
        config: &config,
        outpost: &outpost,
        shim_exe: &shim_exe,
        stops: &stops,
        serve_done: &serve_done,
    };
    let outcome = demo.play(args.keep_running, listen).await;

    // Whatever happened: Garrison stops, then nothing of the demo is left.
    println!("stopping");
    serve_stop.cancel();
    let serve_failed = match serve_task.await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.context("garrison serve failed")),
        Err(e) => Some(anyhow::anyhow!("garrison serve panicked: {e}")),
    };
    let not_removed =
        stop::remove_sandboxes(configured.as_ref(), &state_dir, &shim_exe, "still there").await;
    emu.shutdown().await;
    if let Some(e) = serve_failed {
        return Err(e);
    }
    if outcome? || not_removed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// The backend the demo runs on (building its image first when that is all
/// the local backend lacks), configured from this process's environment.
async fn choose_backend(
    requested: Option<&'static dyn BackendPlugin>,
    state_dir: &Path,
) -> anyhow::Result<(backend::Choice, Arc<dyn ConfiguredBackend>)> {
    let local_plugin: &'static dyn BackendPlugin = &local::PLUGIN;
    // Its settings (SANDBOX_RUNTIME) decide what is checked.
    let local = configure(local_plugin);
    let host_asked = requested.is_some_and(|b| b.name() == host::PLUGIN.name());
    let (checks, mmdebstrap) = if host_asked {
        (Vec::new(), false)
    } else {
        backend::checks_here(state_dir, local.as_ref().ok().map(|b| b.as_ref()))
    };
    let choice = backend::choose(
        requested,
        state_dir,
        &checks,
        mmdebstrap,
        &this_command_line(),
        backend::build_default_image,
    )
    .await?;
    let configured = if choice.backend.name() == local_plugin.name() {
        local?
    } else {
        configure(choice.backend)?
    };
    Ok((choice, configured))
}

/// How this demo was started, quoted for a shell (to be run again as root).
fn this_command_line() -> String {
    let words: Vec<String> = std::env::args()
        .map(|word| {
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+".contains(c));
            if plain {
                word
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect();
    words.join(" ")
}

/// What one run of the demo plays on.
struct Demo<'a> {
    emu: &'a Emulator,
    serving: &'a Arc<Serving>,
    config: &'a ServeConfig,
    outpost: &'a str,
    shim_exe: &'a Path,
    stops: &'a stop::Stops,
    /// Cancelled when `garrison serve` ended, whatever the reason.
    serve_done: &'a CancellationToken,
}

impl Demo<'_> {
    /// The scripted sessions, their summary, then (with `--keep-running`)
    /// serving until a stop signal. Whether an expectation failed.
    async fn play(&self, keep_running: bool, listen: SocketAddr) -> anyhow::Result<bool> {
        let (sessions, ended) = tokio::select! {
            result = scripted(self.emu, self.serving, self.outpost, self.stops) => result?,
            () = self.serve_done.cancelled() => bail!("garrison serve stopped early"),
        };
        let mut expectations = report(self.emu, self.serving, &sessions);
        expectations.push(no_sandbox_left(self.config, self.shim_exe).await);
        print!("{}", summary::expectation_lines(&expectations));
        let failed = expectations.iter().any(|e| !e.passed) || ended != Ended::AllFinished;

        if keep_running && ended != Ended::Interrupted {
            println!();
            println!(
                "still serving: open http://{listen}/ ; the emulator is at {} (outpost {}); \
                 Ctrl-C stops",
                self.emu.base_url(),
                self.outpost
            );
            tokio::select! {
                () = self.stops.interrupt.cancelled() => {}
                () = self.serve_done.cancelled() => bail!("garrison serve stopped early"),
            }
        }
        Ok(failed)
    }
}

/// `$GARRISON_HOME/demo`, else `demo` under the default state directory.
fn default_state_dir() -> anyhow::Result<PathBuf> {
    let host = orchestrator::settings::HostEnv::current();
    let base = match orchestrator::settings::RawSettings::from_env(&host).state_dir {
        Some(home) => home.value,
        None => host
            .default_state_dir()
            .map_err(|e| anyhow::anyhow!("{e}; pass --state-dir"))?,
    };
    Ok(base.join("demo"))
}

/// `wanted` if it can be bound now, else a free port on the same address.
/// (Checked by binding and letting go: another process could still take
/// it in between, and then serve reports the bind error.)
fn free_listen(wanted: SocketAddr) -> SocketAddr {
    if let Ok(listener) = TcpListener::bind(wanted) {
        // Port 0 becomes the port the system picked, so the address
        // printed is one a browser can open.
        return listener.local_addr().unwrap_or(wanted);
    }
    let free = TcpListener::bind(SocketAddr::new(wanted.ip(), 0))
        .and_then(|l| l.local_addr())
        .unwrap_or(wanted);
    println!("{wanted} is taken; the dashboard listens on {free} instead");
    free
}

fn serve_config(
    emu: &Emulator,
    state_dir: &Path,
    outpost: &str,
    (backend, configured): (&'static str, Arc<dyn ConfiguredBackend>),
    listen: SocketAddr,
) -> ServeConfig {
    ServeConfig {
        gateway_url: None,
        api_url: emu.base_url(),
        token: Secret::new(emu.account_token()),
        acceptor_id: None,
        static_base_url: emu.static_base_url(),
        state_dir: state_dir.to_owned(),
        state_dir_min_free_bytes: orchestrator::settings::DEFAULT_STATE_DIR_MIN_FREE_MB << 20,
        snapshot_dir: state_dir.join("snapshots"),
        snapshot_store: None,
        snapshot_retention: orchestrator::settings::DEFAULT_SNAPSHOT_RETENTION.into(),
        relist_interval: orchestrator::settings::DEFAULT_RELIST_INTERVAL,
        queue_mode: QueueMode::Watch,
        drain: false,
        policy: Default::default(),
        outposts: vec![OutpostConfig {
            outpost_id: outpost.to_owned(),
            backend,
            max_concurrent: Role::ALL.len(),
            // Small: the demo's sessions run a few shell commands.
            resources: Resources {
                cpus: 1.0,
                memory_mb: 1024,
                disk_mb: 1024,
            },
            image: None,
            platform: Platform::Linux,
            repos: Default::default(),
        }],
        admin_listen: Some(listen),
        backends: BTreeMap::from([(backend, configured)]),
    }
}

/// The demo's backend with its settings from this process's environment
/// (the local backend's `GARRISON_STATIC_SHIM`, say).
fn configure(backend: &dyn BackendPlugin) -> anyhow::Result<Arc<dyn ConfiguredBackend>> {
    let host = HostEnv::current();
    let none = BTreeMap::new();
    Ok(backend.configure(&BackendSource::new(&host, &none))?)
}

/// Enqueues the sessions and follows them to the end (or Ctrl-C, then
/// ends them and waits a little for the clean-up).
async fn scripted(
    emu: &Emulator,
    serving: &Arc<Serving>,
    outpost: &str,
    stops: &stop::Stops,
) -> anyhow::Result<(Vec<Tracked>, Ended)> {
    let view = serving.views[0].clone();
    let deadline = Instant::now() + HANG_GUARD;
    while !view.is_synced() {
        if Instant::now() > deadline {
            bail!("garrison serve did not list the emulator's queue");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
            () = stops.interrupt.cancelled() => return Ok((Vec::new(), Ended::Interrupted)),
        }
    }
    let started = Instant::now();
    let mut sessions = Vec::new();
    for role in Role::ALL {
        let t = Tracked::enqueue(emu, outpost, role)?;
        println!("enqueued {:<7} {}: {}", role.label(), t.id, role.story());
        sessions.push(t);
    }
    follow::header();
    let mut ended = follow::follow(
        emu,
        serving,
        &mut sessions,
        started,
        HANG_GUARD,
        &stops.interrupt,
    )
    .await;
    if ended == Ended::Interrupted {
        println!(
            "interrupted: ending the demo's sessions (Ctrl-C again to stop waiting; \
             their sandboxes are removed either way)"
        );
        for t in sessions.iter_mut().filter(|t| t.finished.is_none()) {
            t.abandoned = true;
            let _ = emu.terminate(&t.id);
        }
        follow::follow(
            emu,
            serving,
            &mut sessions,
            started,
            WIND_DOWN,
            &stops.hurry,
        )
        .await;
        ended = Ended::Interrupted;
    } else if ended == Ended::TimedOut {
        println!("gave up waiting after {} s", HANG_GUARD.as_secs());
    }
    Ok((sessions, ended))
}

/// Prints the session table and returns every expectation.
fn report(emu: &Emulator, serving: &Serving, sessions: &[Tracked]) -> Vec<Expectation> {
    let views: Vec<_> = sessions.iter().map(|t| (t, emu.session(&t.id))).collect();
    println!();
    print!("{}", summary::session_rows(&views));
    println!();
    let mut all = Vec::new();
    for (t, view) in &views {
        let Some(view) = view else { continue };
        let snapshotted = fleet::SessionId::new(t.id.as_str())
            .ok()
            .and_then(|id| serving.store.events(&id, 0).ok())
            .unwrap_or_default()
            .iter()
            .any(|e| e.kind == "snapshot");
        all.extend(scenario::expectations(t, view, snapshotted));
    }
    all
}

/// Every sandbox of the demo's outpost is gone at the end.
async fn no_sandbox_left(config: &ServeConfig, shim_exe: &Path) -> Expectation {
    let outpost = &config.outposts[0];
    let what = "no sandbox left behind".to_owned();
    let placement = Placement::new(&config.state_dir, &config.snapshot_dir, shim_exe);
    let listed = match config.backends[outpost.backend].build(&placement) {
        Ok(backend) => backend.list().await.map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    let passed = match listed {
        Ok(handles) => !handles
            .iter()
            .any(|h| h.labels.get(sandbox::LABEL_OUTPOST_ID) == Some(&outpost.outpost_id)),
        Err(e) => {
            println!("listing sandboxes failed: {e:#}");
            false
        }
    };
    Expectation { what, passed }
}
