//! `garrison serve`: one loop per outpost that claims what the planner
//! picks, one runner per held session, and the clean-up around them.
//!
//! The claim round lives in `serve/claims.rs`, the clean-up of orphaned
//! sandboxes and expired snapshots in `serve/cleanup.rs`, the checks made
//! once at start in `serve/start_check.rs`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleet::{ClientOptions, FleetClient};
use sandbox::plugin::Placement;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::metrics::Metrics;
use crate::planner::{RunnerEnd, cooldown_until};
use crate::queue::{self, QueueView};
use crate::redact::Redactor;
use crate::remote::RemoteResolver;
use crate::room::StateRoom;
use crate::session::Deps;
use crate::session::{OperatorStops, SessionRunner};
use crate::session_log::SessionLogs;
use crate::settings::ServeConfig;
use crate::store::Store;
use common::now_ms;

mod claims;
mod cleanup;
mod ended;
mod lost;
mod platform;
mod start_check;

pub use crate::serving::Serving;

pub use platform::PlatformRefused;

use claims::{ClaimReply, ClaimState, claim_answered, claim_round};
use cleanup::{clean_orphans, sweep_snapshots};
use ended::{LEFTOVER_SWEEP, sweep_leftovers};
use lost::ask_again_about_lost_sessions;
pub use start_check::Misconfigured;

/// How often the claim loop looks at the queue when nothing wakes it.
const CLAIM_TICK: Duration = Duration::from_secs(1);
const RETENTION_SWEEP: Duration = Duration::from_secs(3600);

/// The host's repository mirrors, under the state directory.
const MIRRORS_DIR: &str = "repo-mirrors";

/// Where the per-process pieces live under the state directory.
pub fn db_path(state_dir: &std::path::Path) -> PathBuf {
    state_dir.join("garrison.db")
}

fn generate_acceptor_id() -> String {
    let host = nix_hostname().unwrap_or_else(|| "host".to_owned());
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(40)
        .collect();
    format!("garrison-{host}-{:08x}", rand::random::<u32>())
}

fn nix_hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Refuses an outpost whose platform (its setting, and the fleet API's word
/// where the token may read the outpost) the backend does not run.
async fn check_platform(
    client: &FleetClient,
    outpost: &crate::settings::OutpostConfig,
    capabilities: sandbox::Capabilities,
) -> Result<(), PlatformRefused> {
    use platform::{PlatformSource, check};
    let id = &outpost.outpost_id;
    check(
        id,
        &outpost.platform,
        PlatformSource::Setting,
        outpost.backend,
        &capabilities,
    )?;
    match client.get_outpost(id).await {
        Ok(Some(found)) => check(
            id,
            &found.spec.platform,
            PlatformSource::Outpost,
            outpost.backend,
            &capabilities,
        )?,
        // Reading an outpost takes the orchestrator scope, which a machine
        // token lacks: the setting is all there is to go by.
        Err(e) if e.status_code() == Some(403) => {
            info!(outpost = %id, "the token may not read the outpost; its platform is taken from the settings")
        }
        Ok(None) => {
            warn!(outpost = %id, "the fleet API does not know the outpost; its platform is taken from the settings")
        }
        Err(e) => {
            warn!(outpost = %id, error = %e, "reading the outpost failed; its platform is taken from the settings")
        }
    }
    Ok(())
}

/// Serves every configured outpost until `stop` is cancelled; then stops
/// claiming, releases claims whose sandbox never started, leaves running
/// sessions alone (or, with `drain`, waits for them to end) and returns.
///
/// Before anything is claimed, each outpost's queue is read once: a token
/// the API refuses or an outpost it does not know ends `serve` with a
/// [`Misconfigured`] error (see `serve/start_check.rs`).
pub async fn serve(
    config: ServeConfig,
    shim_exe: PathBuf,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let serving = prepare(&config)?;
    let outposts: Vec<&str> = config
        .outposts
        .iter()
        .map(|o| o.outpost_id.as_str())
        .collect();
    tokio::select! {
        checked = start_check::check_api(
            &serving.client,
            &outposts,
            start_check::API_CHECK_LIMIT,
        ) => checked?,
        _ = stop.cancelled() => return Ok(()),
    }
    run_prepared(config, serving, shim_exe, stop).await
}

/// Opens the state store and the client (fails fast on a bad setting,
/// and with a [`Misconfigured`] error on a state directory this user
/// cannot write).
pub fn prepare(config: &ServeConfig) -> anyhow::Result<Arc<Serving>> {
    start_check::writable_state_dir(&config.state_dir)?;
    let store = Arc::new(Store::open(&db_path(&config.state_dir))?);
    let acceptor_id = match &config.acceptor_id {
        Some(id) => id.clone(),
        None => store.acceptor_id(generate_acceptor_id)?,
    };
    // The API URL and the token were checked as settings already: what is
    // left to fail here is a setting too.
    let client = FleetClient::new(
        &config.api_url,
        config.token.clone(),
        ClientOptions::default(),
    )
    .map_err(|e| Misconfigured(format!("building the fleet API client: {e}")))?;
    let views = config
        .outposts
        .iter()
        .map(|o| QueueView::new(&o.outpost_id))
        .collect();
    let room = Arc::new(StateRoom::new(
        &config.state_dir,
        config.state_dir_min_free_bytes,
        store.clone(),
    ));
    Ok(Arc::new(Serving {
        acceptor_id,
        room,
        store,
        metrics: Arc::new(Metrics::default()),
        client,
        views,
        operator_stops: Arc::new(OperatorStops::default()),
    }))
}

/// Serves with what [`prepare`] made until `stop`.
pub async fn run_prepared(
    config: ServeConfig,
    serving: Arc<Serving>,
    shim_exe: PathBuf,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let redactor = Arc::new(Redactor::default());
    redactor.add(config.token.expose());
    for backend in config.backends.values() {
        for secret in backend.secrets() {
            redactor.add(secret.expose());
        }
    }
    let logs = SessionLogs::new(config.state_dir.join("sessions"), redactor)?;
    let resolver = Arc::new(RemoteResolver::new(
        &config.static_base_url,
        config.state_dir.join("cache").join("remote"),
    )?);
    info!(acceptor_id = %serving.acceptor_id, outposts = config.outposts.len(), "garrison serving");
    match &config.snapshot_store {
        // The URL never holds credentials (settings refuse one that does).
        Some(store) => info!(
            snapshot_store = %store.url,
            encrypted = store.key.is_some(),
            "snapshots are kept in an object store"
        ),
        None => {
            info!(snapshot_dir = %config.snapshot_dir.display(), "snapshots are kept in a directory")
        }
    }
    // Stops (dropped) when serving returns.
    let _admin = match config.admin_listen {
        Some(addr) => {
            let token = crate::admin::token::load_or_create(&config.state_dir)?;
            Some(
                crate::admin::start(
                    addr,
                    crate::admin::AdminState::new(&config, serving.clone(), token),
                )
                .await?,
            )
        }
        None => None,
    };

    // Every backend is built, and every outpost's platform checked against
    // it, before anything is claimed.
    let mut built = Vec::new();
    for outpost in &config.outposts {
        let backend = config
            .backends
            .get(outpost.backend)
            .with_context(|| format!("the {} backend was not configured", outpost.backend))?
            .build(
                &Placement::new(&config.state_dir, &config.snapshot_dir, &shim_exe)
                    .with_snapshot_store(config.snapshot_store.clone()),
            )?;
        check_platform(&serving.client, outpost, backend.capabilities()).await?;
        built.push(backend);
    }

    let mut outposts = JoinSet::new();
    let queue_stop = CancellationToken::new();
    let mirrors = Arc::new(crate::repos::Mirrors::new(
        config.state_dir.join(MIRRORS_DIR),
    ));
    let cloned = config.outposts.iter().flat_map(|o| &o.repos.urls);
    let removed = mirrors.remove_all_but(cloned.map(String::as_str));
    if removed > 0 {
        info!(
            removed,
            "removed the mirrors of repositories no outpost clones any more"
        );
    }
    for ((outpost, view), backend) in config.outposts.iter().zip(&serving.views).zip(built) {
        let deps = Arc::new(Deps {
            client: serving.client.clone(),
            backend,
            store: serving.store.clone(),
            resolver: resolver.clone(),
            view: view.clone(),
            logs: logs.clone(),
            metrics: serving.metrics.clone(),
            acceptor_id: serving.acceptor_id.clone(),
            outpost: outpost.clone(),
            policy: config.policy.clone(),
            gateway_url: config.gateway_url.clone(),
            stopping: stop.clone(),
            drain: config.drain,
            operator_stops: serving.operator_stops.clone(),
            room: serving.room.clone(),
            learned_lifetime: Default::default(),
            mirrors: mirrors.clone(),
        });
        outposts.spawn(queue::run(
            serving.client.clone(),
            view.clone(),
            serving.store.clone(),
            config.relist_interval,
            config.queue_mode,
            queue_stop.clone(),
        ));
        outposts.spawn(outpost_loop(deps, config.snapshot_retention));
    }
    // The queue tasks end only when told; the outpost loops end after stop.
    let mut loops_left = config.outposts.len();
    while loops_left > 0 {
        match outposts.join_next().await {
            Some(Ok(())) => loops_left -= 1,
            Some(Err(e)) => {
                error!(error = %e, "an outpost task panicked");
                loops_left -= 1;
            }
            None => break,
        }
    }
    queue_stop.cancel();
    while outposts.join_next().await.is_some() {}
    info!("garrison stopped");
    Ok(())
}

/// Claims for one outpost and keeps a runner per held session.
async fn outpost_loop(deps: Arc<Deps>, retention: Option<Duration>) {
    let outpost_id = deps.outpost.outpost_id.clone();
    let mut runners: JoinSet<(fleet::SessionId, RunnerEnd)> = JoinSet::new();
    let mut claiming: JoinSet<ClaimReply> = JoinSet::new();
    let mut state = ClaimState::default();

    // Re-adopt what the last run of this Garrison left.
    match deps.store.active_sessions(&outpost_id) {
        Ok(records) => {
            for rec in records {
                // Every recorded id was checked when its row was read.
                info!(session_id = rec.session_id.as_str(), stage = %rec.stage, "re-adopting session");
                state.held.insert(rec.session_id.clone());
                let id = rec.session_id.clone();
                let runner = SessionRunner::adopted(deps.clone(), rec);
                runners.spawn(async move { (id, runner.run().await) });
            }
        }
        Err(e) => error!(error = %e, "reading the state store failed"),
    }
    clean_orphans(&deps, retention).await;

    let mut changes = deps.view.subscribe();
    let mut sweep = tokio::time::interval(RETENTION_SWEEP);
    // Its first tick is at once: what the last run of this Garrison left
    // staged goes at start.
    let mut leftover_sweep = tokio::time::interval(LEFTOVER_SWEEP);
    let mut asking: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        while let Some(done) = runners.try_join_next() {
            runner_done(&deps, done, &mut state);
        }
        while let Some(reply) = claiming.try_join_next() {
            claim_answered(&deps, &mut runners, &mut state, reply).await;
        }
        if deps.stopping.is_cancelled() {
            break;
        }
        if deps.view.is_synced() {
            claim_round(&deps, &mut runners, &mut claiming, &mut state).await;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(CLAIM_TICK) => {}
            _ = deps.stopping.cancelled() => {}
            _ = sweep.tick() => {
                sweep_snapshots(&deps, retention).await;
                clean_orphans(&deps, retention).await;
            }
            _ = leftover_sweep.tick() => {
                sweep_leftovers(&deps.store, deps.backend.as_ref()).await;
                // Apart from the loop: a host still cut off from the fleet
                // API waits out each question's timeout.
                if asking.as_ref().is_none_or(|t| t.is_finished()) {
                    let deps = deps.clone();
                    asking = Some(tokio::spawn(async move {
                        ask_again_about_lost_sessions(&deps).await;
                    }));
                }
            }
            Some(reply) = claiming.join_next(), if !claiming.is_empty() => {
                claim_answered(&deps, &mut runners, &mut state, reply).await;
            }
            Some(done) = runners.join_next(), if !runners.is_empty() => {
                runner_done(&deps, done, &mut state);
            }
        }
    }
    // A claim won while stopping gets its runner, which gives it back.
    while let Some(reply) = claiming.join_next().await {
        claim_answered(&deps, &mut runners, &mut state, reply).await;
    }
    info!(
        outpost_id,
        sessions = runners.len(),
        drain = deps.drain,
        "stopped claiming; waiting for runners"
    );
    while runners.join_next().await.is_some() {}
}

fn runner_done(
    deps: &Deps,
    done: Result<(fleet::SessionId, RunnerEnd), tokio::task::JoinError>,
    state: &mut ClaimState,
) {
    match done {
        Ok((session_id, end)) => {
            if let Some(until) = cooldown_until(end, now_ms()) {
                state.cooldown.insert(session_id.clone(), until);
            }
            state.held.remove(&session_id);
            // A runner that ends has given its claim back (or left it for
            // the next start to adopt). The view may not show that yet: as
            // with the planner's own releases, the entry as seen now is not
            // released again until it changes (the fleet API would answer a
            // second release 409, not the holder).
            if let Some(entry) = deps.view.get(&session_id) {
                state.released.insert(session_id, entry.metadata.updated_at);
            }
        }
        Err(e) => error!(error = %e, "a session runner panicked"),
    }
}
