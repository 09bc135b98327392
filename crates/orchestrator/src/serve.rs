//! `garrison serve`: one loop per outpost that claims what the planner
//! picks, one runner per held session, and the clean-up around them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleet::{ClaimError, ClientOptions, FleetClient, Timestamp};
use sandbox::Sandbox;
use sandbox::plugin::Placement;
use serde_json::json;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::metrics::Metrics;
use crate::planner::{
    ClaimAction, ClaimObs, Finish, OperatorStop, RunnerEnd, Stage, cooldown_until, plan_claims,
};
use crate::queue::{self, QueueView};
use crate::redact::Redactor;
use crate::remote::RemoteResolver;
use crate::session::{Deps, OperatorStops, SessionRunner, now_ms};
use crate::session_log::SessionLogs;
use crate::settings::ServeConfig;
use crate::store::{SessionRecord, Store};

/// How often the claim loop looks at the queue when nothing wakes it.
const CLAIM_TICK: Duration = Duration::from_secs(1);
const RETENTION_SWEEP: Duration = Duration::from_secs(3600);

/// What a running `serve` shares with the admin listener and commands.
pub struct Serving {
    pub acceptor_id: String,
    pub store: Arc<Store>,
    pub metrics: Arc<Metrics>,
    pub client: FleetClient,
    pub views: Vec<Arc<QueueView>>,
    /// The runners of held sessions, for operator requests.
    pub operator_stops: Arc<OperatorStops>,
}

/// Why [`Serving::request_terminate`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminateError {
    /// No such session in the state store.
    NotFound,
    /// Known, but not held and running here now (done, already winding
    /// down, or left to the next Garrison).
    NotActive,
}

impl std::fmt::Display for TerminateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotFound => "no such session",
            Self::NotActive => "the session is not active here",
        })
    }
}

impl std::error::Error for TerminateError {}

impl Serving {
    /// Asks the session's runner to stop the sandbox, keep or drop the
    /// snapshot as asked, and release the claim (`garrison terminate`). The
    /// runner does it at its next step; the request itself returns at once.
    pub fn request_terminate(
        &self,
        session_id: &str,
        keep_snapshot: bool,
    ) -> Result<(), TerminateError> {
        match self.store.session(session_id) {
            Ok(None) => return Err(TerminateError::NotFound),
            Ok(Some(rec)) if matches!(rec.stage, Stage::Done(_) | Stage::Finishing(_)) => {
                return Err(TerminateError::NotActive);
            }
            Ok(Some(_)) => {}
            Err(e) => warn!(session_id, error = %e, "reading the state store failed"),
        }
        if self
            .operator_stops
            .request(session_id, OperatorStop { keep_snapshot })
        {
            Ok(())
        } else {
            Err(TerminateError::NotActive)
        }
    }
}

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

/// Serves every configured outpost until `stop` is cancelled; then stops
/// claiming, releases claims whose sandbox never started, leaves running
/// sessions alone (or, with `drain`, waits for them to end) and returns.
pub async fn serve(
    config: ServeConfig,
    shim_exe: PathBuf,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let serving = prepare(&config)?;
    run_prepared(config, serving, shim_exe, stop).await
}

/// Opens the state store and the client (fails fast on a bad setting).
pub fn prepare(config: &ServeConfig) -> anyhow::Result<Arc<Serving>> {
    std::fs::create_dir_all(&config.state_dir).with_context(|| {
        format!(
            "creating the state directory {}",
            config.state_dir.display()
        )
    })?;
    let store = Arc::new(Store::open(&db_path(&config.state_dir))?);
    let acceptor_id = match &config.acceptor_id {
        Some(id) => id.clone(),
        None => store.acceptor_id(generate_acceptor_id)?,
    };
    let client = FleetClient::new(
        &config.api_url,
        config.token.clone(),
        ClientOptions::default(),
    )
    .context("building the fleet API client")?;
    let views = config
        .outposts
        .iter()
        .map(|o| QueueView::new(&o.outpost_id))
        .collect();
    Ok(Arc::new(Serving {
        acceptor_id,
        store,
        metrics: Arc::new(Metrics::default()),
        client,
        views,
        operator_stops: Arc::new(OperatorStops::default()),
    }))
}

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
    // Stops (dropped) when serving returns.
    let _admin = match config.admin_listen {
        Some(addr) => Some(
            crate::admin::start(
                addr,
                crate::admin::AdminState::new(&config, serving.clone()),
            )
            .await?,
        ),
        None => None,
    };

    let mut outposts = JoinSet::new();
    let queue_stop = CancellationToken::new();
    for (outpost, view) in config.outposts.iter().zip(&serving.views) {
        let backend = config
            .backends
            .get(outpost.backend)
            .with_context(|| format!("the {} backend was not configured", outpost.backend))?
            .build(&Placement::new(
                &config.state_dir,
                &config.snapshot_dir,
                &shim_exe,
            ))?;
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
            stopping: stop.clone(),
            drain: config.drain,
            operator_stops: serving.operator_stops.clone(),
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
    let mut runners: JoinSet<(String, RunnerEnd)> = JoinSet::new();
    let mut held: BTreeSet<String> = BTreeSet::new();
    let mut lost: BTreeMap<String, Option<Timestamp>> = BTreeMap::new();
    let mut cooldown: BTreeMap<String, i64> = BTreeMap::new();

    // Re-adopt what the last run of this Garrison left.
    match deps.store.active_sessions(&outpost_id) {
        Ok(records) => {
            for rec in records {
                info!(session_id = rec.session_id, stage = ?rec.stage, "re-adopting session");
                held.insert(rec.session_id.clone());
                let runner = SessionRunner::adopted(deps.clone(), rec.clone());
                runners.spawn(async move { (rec.session_id, runner.run().await) });
            }
        }
        Err(e) => error!(error = %e, "reading the state store failed"),
    }
    clean_orphans(&deps, retention).await;

    let mut changes = deps.view.subscribe();
    let mut sweep = tokio::time::interval(RETENTION_SWEEP);
    loop {
        while let Some(done) = runners.try_join_next() {
            runner_done(done, &mut held, &mut cooldown);
        }
        if deps.stopping.is_cancelled() {
            break;
        }
        if deps.view.is_synced() {
            claim_round(&deps, &mut runners, &mut held, &mut lost, &mut cooldown).await;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(CLAIM_TICK) => {}
            _ = deps.stopping.cancelled() => {}
            _ = sweep.tick() => {
                sweep_snapshots(&deps, retention).await;
                clean_orphans(&deps, retention).await;
            }
            Some(done) = runners.join_next(), if !runners.is_empty() => {
                runner_done(done, &mut held, &mut cooldown);
            }
        }
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
    done: Result<(String, RunnerEnd), tokio::task::JoinError>,
    held: &mut BTreeSet<String>,
    cooldown: &mut BTreeMap<String, i64>,
) {
    match done {
        Ok((session_id, end)) => {
            if let Some(until) = cooldown_until(end, now_ms()) {
                cooldown.insert(session_id.clone(), until);
            }
            held.remove(&session_id);
        }
        Err(e) => error!(error = %e, "a session runner panicked"),
    }
}

async fn claim_round(
    deps: &Arc<Deps>,
    runners: &mut JoinSet<(String, RunnerEnd)>,
    held: &mut BTreeSet<String>,
    lost: &mut BTreeMap<String, Option<Timestamp>>,
    cooldown: &mut BTreeMap<String, i64>,
) {
    let entries = deps.view.snapshot();
    lost.retain(|id, _| entries.contains_key(id));
    let now = now_ms();
    cooldown.retain(|_, until| *until > now);
    let actions = plan_claims(&ClaimObs {
        now: now_ms(),
        acceptor_id: &deps.acceptor_id,
        platform: &deps.outpost.platform,
        capacity: deps.outpost.max_concurrent.saturating_sub(held.len()),
        stopping: deps.stopping.is_cancelled(),
        entries: &entries,
        held,
        lost,
        cooldown,
    });
    for action in actions {
        match action {
            ClaimAction::Claim(session_id) => {
                let Some(seen) = entries.get(&session_id) else {
                    continue;
                };
                match deps.client.claim(&session_id, &deps.acceptor_id).await {
                    Ok(entry) => {
                        Metrics::inc(&deps.metrics.claims_won);
                        let rec = claimed_record(deps, &entry);
                        if let Err(e) = deps.store.put_session(&rec) {
                            // Unrecorded, the claim would be adopted after a
                            // restart; still, do not run what we cannot record.
                            error!(session_id, error = %e, "recording the claim failed; releasing it");
                            let _ = deps.client.release(&session_id, &deps.acceptor_id).await;
                            if let Some(until) = cooldown_until(RunnerEnd::RecordFailed, now_ms()) {
                                cooldown.insert(session_id, until);
                            }
                            continue;
                        }
                        info!(session_id, kind = %rec.kind, "claimed");
                        if let Err(e) = deps.store.add_event(
                            &session_id,
                            now_ms(),
                            "claimed",
                            &json!({ "acceptor_id": deps.acceptor_id, "kind": rec.kind }),
                        ) {
                            warn!(session_id, error = %e, "recording an event failed");
                        }
                        if let Err(e) = deps.logs.event(
                            &session_id,
                            now_ms(),
                            "claimed",
                            &json!({ "acceptor_id": deps.acceptor_id }),
                        ) {
                            warn!(session_id, error = %e, "writing an event to the session log failed");
                        }
                        deps.view.upsert(entry.clone());
                        held.insert(session_id.clone());
                        let runner = SessionRunner::claimed(deps.clone(), rec, entry);
                        runners.spawn(async move { (session_id, runner.run().await) });
                    }
                    Err(ClaimError::Conflict) => {
                        Metrics::inc(&deps.metrics.claims_lost);
                        lost.insert(session_id, seen.metadata.updated_at);
                    }
                    Err(ClaimError::Fleet(e)) => {
                        warn!(session_id, error = %e, "claim failed");
                    }
                }
            }
            ClaimAction::Adopt(session_id) => {
                let Some(entry) = entries.get(&session_id) else {
                    continue;
                };
                // A recorded session that is not held has finished here: the
                // view still shows our claim only until the release echoes
                // back (or, if the release failed, until the claim expires).
                if !matches!(deps.store.session(&session_id), Ok(None)) {
                    continue;
                }
                let rec = claimed_record(deps, entry);
                if deps.store.put_session(&rec).is_err() {
                    continue;
                }
                info!(session_id, "adopting a claim the state store did not know");
                held.insert(session_id.clone());
                let runner = SessionRunner::adopted(deps.clone(), rec);
                runners.spawn(async move { (session_id, runner.run().await) });
            }
        }
    }
}

/// The state-store record of a session just claimed (or adopted).
fn claimed_record(deps: &Deps, entry: &fleet::QueueEntry) -> SessionRecord {
    let mut rec = SessionRecord::new(
        entry.session_id(),
        &deps.outpost.outpost_id,
        entry.spec.kind.clone(),
        deps.backend.kind(),
        now_ms(),
    );
    rec.claim_deadline = entry.status.claim_deadline.map(|d| d.unix_millis());
    rec
}

/// Destroys sandboxes of this outpost that no recorded session owns (left
/// by a crash before their session was recorded). Snapshots are kept, and
/// so are the sandboxes of this store's sleeping sessions where suspending
/// keeps memory, for as long as their snapshots are (`retention`).
async fn clean_orphans(deps: &Arc<Deps>, retention: Option<Duration>) {
    let keeps_suspended = deps.backend.capabilities().suspend_keeps_memory;
    let sandboxes = match deps.backend.list().await {
        Ok(list) => list,
        Err(e) => {
            warn!(error = %e, "listing sandboxes for clean-up failed");
            return;
        }
    };
    for handle in sandboxes {
        let Some(session_id) = handle.labels.get(sandbox::LABEL_SESSION_ID) else {
            continue;
        };
        let record = deps
            .store
            .session(session_id)
            .ok()
            .flatten()
            .map(|s| (s.stage, s.updated_at));
        let mine = Mine {
            outpost_id: &deps.outpost.outpost_id,
            acceptor_id: &deps.acceptor_id,
            keeps_suspended,
            asleep_since_cutoff: retention.map(|r| now_ms() - r.as_millis() as i64),
        };
        if is_orphan(&handle.labels, record, &mine) {
            warn!(
                session_id,
                sandbox = handle.name,
                "destroying an orphaned sandbox"
            );
            if let Err(e) = deps.backend.destroy(&handle).await {
                warn!(sandbox = handle.name, error = %e, "destroying an orphan failed");
            }
        }
    }
}

/// Who is cleaning up, for [`is_orphan`].
struct Mine<'a> {
    outpost_id: &'a str,
    acceptor_id: &'a str,
    /// The backend's suspend keeps memory, so sleeping sessions keep their
    /// sandboxes.
    keeps_suspended: bool,
    /// A session asleep since before this (Unix ms) no longer keeps its
    /// sandbox: its snapshots expire at the same age. `None`: kept for good.
    asleep_since_cutoff: Option<i64>,
}

/// Whether a sandbox with these labels, whose session this store has at
/// `(stage, updated_at)` (or not at all), is an orphan of ours to destroy.
fn is_orphan(
    labels: &std::collections::BTreeMap<String, String>,
    record: Option<(Stage, i64)>,
    mine: &Mine<'_>,
) -> bool {
    let label = |key: &str| labels.get(key).map(String::as_str);
    if label(sandbox::LABEL_OUTPOST_ID) != Some(mine.outpost_id)
        || label(sandbox::LABEL_SESSION_ID).is_none()
    {
        return false;
    }
    // Another Garrison's, on a cloud account both use: its own clean-up
    // decides.
    if label(sandbox::LABEL_ACCEPTOR_ID).is_some_and(|a| a != mine.acceptor_id) {
        return false;
    }
    match record {
        Some((Stage::Done(Finish::Suspended), since)) => {
            !mine.keeps_suspended
                || mine
                    .asleep_since_cutoff
                    .is_some_and(|cutoff| since < cutoff)
        }
        Some((stage, _)) => stage.is_done(),
        // Ours but unknown to this store: left by a crash before its
        // session was recorded, and costing compute until the provider's
        // timeout.
        None => true,
    }
}

/// Deletes snapshots older than the retention period.
async fn sweep_snapshots(deps: &Arc<Deps>, retention: Option<Duration>) {
    if let Some(retention) = retention {
        expire_snapshots(&deps.store, deps.backend.as_ref(), retention, now_ms()).await;
    }
}

/// Deletes this backend's snapshots recorded before `now - retention`, from
/// the backend and the store; returns how many went. Snapshots are never
/// deleted because an entry left the queue, only by age or termination.
pub async fn expire_snapshots(
    store: &Store,
    backend: &dyn Sandbox,
    retention: Duration,
    now: i64,
) -> usize {
    let cutoff = now - retention.as_millis() as i64;
    let Ok(old) = store.snapshots_older_than(cutoff) else {
        return 0;
    };
    let mut expired = 0;
    for stored in old
        .into_iter()
        .filter(|s| s.snapshot.backend == backend.kind())
    {
        match backend.delete_snapshot(&stored.snapshot).await {
            Ok(()) => {
                info!(
                    session_id = stored.session_id,
                    snapshot = stored.snapshot.id,
                    "snapshot expired"
                );
                let _ = store.remove_snapshot(&stored.snapshot.id);
                expired += 1;
            }
            Err(e) => {
                warn!(snapshot = stored.snapshot.id, error = %e, "deleting an expired snapshot failed")
            }
        }
    }
    expired
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SnapshotReason, StoredSnapshot};

    #[test]
    fn orphans_are_ours_on_this_outpost_and_owned_by_no_live_session() {
        let labels = |acceptor: Option<&str>, outpost: &str| {
            let mut l = sandbox::session_labels("s1", outpost);
            if let Some(a) = acceptor {
                l.insert(sandbox::LABEL_ACCEPTOR_ID.into(), a.into());
            }
            l
        };
        let cloud = Mine {
            outpost_id: "o",
            acceptor_id: "me",
            keeps_suspended: true,
            asleep_since_cutoff: Some(1_000),
        };
        let local = Mine {
            keeps_suspended: false,
            ..cloud
        };
        let asleep = Some((Stage::Done(Finish::Suspended), 2_000));
        let ended = Some((Stage::Done(Finish::Terminated), 2_000));
        let mine = labels(Some("me"), "o");
        // Unknown to the store: a crash before the session was recorded.
        assert!(is_orphan(&mine, None, &cloud));
        assert!(is_orphan(&labels(None, "o"), None, &cloud));
        assert!(is_orphan(&mine, ended, &cloud));
        // A sleeping session keeps its sandbox only where suspend keeps memory.
        assert!(!is_orphan(&mine, asleep, &cloud));
        assert!(is_orphan(&mine, asleep, &local));
        // ... until its snapshots would have expired; for good without a
        // retention.
        let long_asleep = Some((Stage::Done(Finish::Suspended), 500));
        assert!(is_orphan(&mine, long_asleep, &cloud));
        let forever = Mine {
            asleep_since_cutoff: None,
            ..cloud
        };
        assert!(!is_orphan(&mine, long_asleep, &forever));
        // A live session's sandbox is never an orphan.
        assert!(!is_orphan(&mine, Some((Stage::Running, 0)), &cloud));
        // Another Garrison's, another outpost's, or not Garrison's at all.
        assert!(!is_orphan(&labels(Some("them"), "o"), None, &cloud));
        assert!(!is_orphan(&labels(Some("me"), "other"), None, &cloud));
        assert!(!is_orphan(&Default::default(), None, &cloud));
    }

    #[tokio::test]
    async fn snapshots_expire_by_age_only() {
        let dir = tempfile::tempdir().unwrap();
        let backend = sandbox::host::HostBackend::new(sandbox::host::HostConfig {
            root: dir.path().join("host"),
            snapshot_dir: dir.path().join("snapshots"),
            shim_exe: "/nonexistent".into(),
        })
        .unwrap();
        let store = Store::in_memory().unwrap();
        let mut kept = Vec::new();
        for session in ["old", "new"] {
            let spec = sandbox::SandboxSpec {
                name: sandbox::SandboxName::for_session(session),
                labels: sandbox::session_labels(session, "o"),
                image: None,
                restore_from: None,
                resources: Default::default(),
                network: Default::default(),
            };
            let handle = backend.create(&spec).await.unwrap();
            let snapshot = backend.snapshot(&handle).await.unwrap();
            backend.destroy(&handle).await.unwrap();
            store
                .add_snapshot(&StoredSnapshot {
                    session_id: session.into(),
                    reason: SnapshotReason::Suspend,
                    snapshot: snapshot.clone(),
                })
                .unwrap();
            kept.push(snapshot);
        }
        let day = Duration::from_secs(86_400);
        // "now" is 31 days after the old one and 29 days after the new one.
        let now = kept[0].created_at_ms + 31 * 86_400_000;
        let mut newer = kept[1].clone();
        newer.created_at_ms = now - 29 * 86_400_000;
        store.remove_snapshot(&kept[1].id).unwrap();
        store
            .add_snapshot(&StoredSnapshot {
                session_id: "new".into(),
                reason: SnapshotReason::Suspend,
                snapshot: newer.clone(),
            })
            .unwrap();

        assert_eq!(expire_snapshots(&store, &backend, 30 * day, now).await, 1);
        assert!(!backend.snapshot_exists(&kept[0]).await.unwrap());
        assert!(store.snapshots("old").unwrap().is_empty());
        assert!(backend.snapshot_exists(&newer).await.unwrap());
        assert_eq!(store.snapshots("new").unwrap().len(), 1);
    }
}
