//! What a failed write to the state store stops: the runner against a real
//! store made read-only, the host backend, and a fleet API that only
//! answers (and counts) requests.

use std::sync::Mutex;

use fleet::{EntryMetadata, EntrySpec, EntryStatus, Phase, SessionKind, SessionStatus, Timestamp};
use host::{HostBackend, HostConfig};
use sandbox::{Handle, ProcessRef, Sandbox, SandboxName, SandboxSpec};
use sha2::{Digest, Sha256};

use fleet::FleetClient;
use tokio_util::sync::CancellationToken;

use super::step::{KeepClaim, StepError};
use super::*;
use crate::metrics::Metrics;
use crate::planner::{Finish, Policy};
use crate::queue::QueueView;
use crate::redact::Redactor;
use crate::remote::RemoteResolver;
use crate::session_log::SessionLogs;
use crate::settings::{OutpostConfig, Repos};
use crate::store::Store;

mod desktop;
mod lapsed;
mod leftovers;
mod lineage;
mod no_room;
mod unrestorable;
mod view_gap;
mod wall_clock;

const SESSION: &str = "s1";
const SHA: &str = "abcdef1";

struct World {
    dir: tempfile::TempDir,
    store: Arc<Store>,
    backend: Arc<HostBackend>,
    /// `METHOD path` of every request the fleet API got.
    requests: Arc<Mutex<Vec<String>>>,
    /// What the fleet API answers a claim (a renewal); `{}` otherwise.
    claim_answer: Arc<Mutex<(u16, serde_json::Value)>>,
    /// What the fleet API answers a GET of the session; `{}` (200) if unset.
    get_answer: Arc<Mutex<Option<(u16, serde_json::Value)>>>,
    /// What the fleet API answers a release; `{}` (200) if unset.
    release_answer: Arc<Mutex<Option<(u16, serde_json::Value)>>>,
    api_url: String,
    /// `gateway_url`: for a claim that carries none.
    fallback_gateway: Option<String>,
}

impl World {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("garrison.db")).unwrap());
        let backend = Arc::new(
            HostBackend::new(HostConfig {
                root: dir.path().join("host"),
                snapshot_dir: dir.path().join("snapshots"),
                snapshot_store: None,
                shim_exe: "/nonexistent".into(),
            })
            .unwrap(),
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let claim_answer = Arc::new(Mutex::new((200, serde_json::json!({}))));
        let get_answer = Arc::new(Mutex::new(None));
        let release_answer = Arc::new(Mutex::new(None));
        let seen = requests.clone();
        let answer = claim_answer.clone();
        let got = get_answer.clone();
        let released = release_answer.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let seen = seen.clone();
            let answer = answer.clone();
            let got = got.clone();
            let released = released.clone();
            async move {
                let path = req.uri().path().to_owned();
                seen.lock()
                    .unwrap()
                    .push(format!("{} {}", req.method(), path));
                let get = got.lock().unwrap().clone();
                let release = released.lock().unwrap().clone();
                let (status, body) = if path.ends_with("/claim") {
                    answer.lock().unwrap().clone()
                } else if let Some(release) = release.filter(|_| path.ends_with("/release")) {
                    release
                } else if let Some(get) = get.filter(|_| {
                    req.method() == axum::http::Method::GET
                        && path.ends_with(&format!("/devins/{SESSION}"))
                }) {
                    get
                } else {
                    (200, serde_json::json!({}))
                };
                (
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    axum::Json(body),
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            dir,
            store,
            backend,
            requests,
            claim_answer,
            get_answer,
            release_answer,
            api_url,
            fallback_gateway: None,
        }
    }

    /// The fleet API answers claims (renewals) with `status` and `body`.
    fn answer_claims(&self, status: u16, body: serde_json::Value) {
        *self.claim_answer.lock().unwrap() = (status, body);
    }

    /// The fleet API answers a release with `status` and `body`.
    fn answer_releases(&self, status: u16, body: serde_json::Value) {
        *self.release_answer.lock().unwrap() = Some((status, body));
    }

    /// The fleet API answers a GET of the session with `status` and `body`.
    fn answer_gets(&self, status: u16, body: serde_json::Value) {
        *self.get_answer.lock().unwrap() = Some((status, body));
    }

    /// A resolver whose cache holds the pinned binary, so nothing is
    /// downloaded.
    fn resolver(&self) -> RemoteResolver {
        let cache = self.dir.path().join("cache");
        let resolver = RemoteResolver::new("http://127.0.0.1:9/", cache.clone()).unwrap();
        let file = format!(
            "devin-remote_{SHA}_{}",
            crate::remote::platform_suffix(sandbox::Arch::current())
        );
        let bytes = b"#!/bin/sh\n";
        std::fs::write(cache.join(&file), bytes).unwrap();
        let digest = hex::encode(Sha256::digest(bytes));
        std::fs::write(
            cache.join(&file).with_extension("sha256"),
            format!("{digest}  {file}\n"),
        )
        .unwrap();
        resolver
    }

    fn runner(&self, rec: SessionRecord) -> SessionRunner {
        self.runner_claimed_with(rec, claim_response())
    }

    /// A runner for a claim the server answered with `answer`, recorded as
    /// the claim round records it.
    fn runner_claimed_with(&self, rec: SessionRecord, answer: QueueEntry) -> SessionRunner {
        self.runner_on(rec, answer, self.backend.clone())
    }

    /// [`Self::runner_claimed_with`] on another backend.
    fn runner_on(
        &self,
        rec: SessionRecord,
        answer: QueueEntry,
        backend: Arc<dyn sandbox::Sandbox>,
    ) -> SessionRunner {
        self.runner_sent_at(rec, answer, backend, tokio::time::Instant::now())
    }

    /// [`Self::runner_on`] for a claim whose request was sent at `sent`.
    fn runner_sent_at(
        &self,
        mut rec: SessionRecord,
        answer: QueueEntry,
        backend: Arc<dyn sandbox::Sandbox>,
        sent: tokio::time::Instant,
    ) -> SessionRunner {
        rec.claim_deadline = answer.status.claim_deadline.map(|d| d.unix_millis());
        SessionRunner::claimed(Arc::new(self.deps_on(backend)), rec, answer, sent)
    }

    /// What a runner on `backend` is given.
    fn deps_on(&self, backend: Arc<dyn sandbox::Sandbox>) -> Deps {
        Deps {
            client: FleetClient::new(&self.api_url, "token".into(), Default::default()).unwrap(),
            backend,
            store: self.store.clone(),
            resolver: Arc::new(self.resolver()),
            view: QueueView::new("o"),
            logs: SessionLogs::new(
                self.dir.path().join("sessions"),
                Arc::new(Redactor::default()),
            )
            .unwrap(),
            metrics: Arc::new(Metrics::default()),
            acceptor_id: "me".into(),
            outpost: OutpostConfig {
                outpost_id: "o".into(),
                backend: "host",
                max_concurrent: 1,
                resources: Default::default(),
                image: None,
                platform: Default::default(),
                repos: Repos::default(),
            },
            policy: Policy::default(),
            gateway_url: self.fallback_gateway.clone(),
            stopping: CancellationToken::new(),
            drain: false,
            operator_stops: Arc::new(OperatorStops::default()),
            room: Arc::new(crate::room::StateRoom::new(
                self.dir.path(),
                0,
                self.store.clone(),
            )),
            learned_lifetime: Default::default(),
            mirrors: Arc::new(crate::repos::Mirrors::new(
                self.dir.path().join("repo-mirrors"),
            )),
        }
    }

    fn releases(&self) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.starts_with("POST") && r.ends_with(&format!("/{SESSION}/release")))
            .count()
    }

    async fn sandbox(&self) -> Handle {
        self.sandbox_labelled(sandbox::session_labels(SESSION, "o"))
            .await
    }

    /// The session's sandbox, made with `labels`.
    async fn sandbox_labelled(&self, labels: std::collections::BTreeMap<String, String>) -> Handle {
        self.backend
            .create(&SandboxSpec {
                name: SandboxName::for_session(SESSION),
                labels,
                image: None,
                restore_from: None,
                resources: Default::default(),
                network: Default::default(),
            })
            .await
            .unwrap()
    }
}

fn claim_response() -> QueueEntry {
    QueueEntry {
        metadata: EntryMetadata {
            session_id: fleet::SessionId::new(SESSION).unwrap(),
            outpost_id: "o".into(),
            created_at: None,
            updated_at: None,
        },
        spec: EntrySpec {
            remote_binary_sha: Some(SHA.into()),
            ..Default::default()
        },
        status: EntryStatus {
            phase: Phase::Claimed,
            session_status: SessionStatus::Pending,
            acceptor_id: Some("me".into()),
            claim_deadline: Timestamp::from_unix_millis(now_ms() + 300_000),
            connect_token: Some("connect".into()),
            gateway_url: Some("http://127.0.0.1:9".into()),
        },
    }
}

fn record(stage: Stage, handle: Option<Handle>) -> SessionRecord {
    let mut rec = SessionRecord::new(
        &fleet::SessionId::new(SESSION).unwrap(),
        "o",
        SessionKind::New,
        "host",
        now_ms(),
    );
    rec.stage = stage;
    rec.claim_deadline = Some(now_ms() + 300_000);
    rec.handle = handle;
    rec
}

async fn run(runner: SessionRunner) -> RunnerEnd {
    tokio::time::timeout(Duration::from_secs(30), runner.run())
        .await
        .expect("the runner stops")
}

#[tokio::test]
async fn a_start_that_cannot_be_recorded_creates_no_sandbox_and_releases_the_claim() {
    let world = World::new().await;
    let rec = record(Stage::Claimed, None);
    world.store.put_session(&rec).unwrap();
    world.store.fail_writes();

    assert_eq!(run(world.runner(rec)).await, RunnerEnd::RecordFailed);

    assert!(world.backend.list().await.unwrap().is_empty());
    assert_eq!(world.releases(), 1);
    let kept = world
        .store
        .session(&fleet::SessionId::new(SESSION).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(kept.stage, Stage::Claimed);
}

#[tokio::test]
async fn a_remote_that_cannot_be_recorded_is_not_spawned() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let rec = record(Stage::Starting, Some(handle.clone()));
    world.store.put_session(&rec).unwrap();
    world.store.fail_writes();
    let mut runner = world.runner(rec);

    let err = runner.spawn_remote().await.unwrap_err();

    assert!(matches!(err, StepError::Record(_)), "{err:#}");
    let process = runner.rec.process.clone().unwrap();
    // The host backend makes a process's directory before anything else.
    let status = world.backend.status(&handle, &process).await;
    assert!(matches!(&status, Err(e) if e.is_gone()), "{status:?}");
    let kept = world
        .store
        .session(&fleet::SessionId::new(SESSION).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!((kept.stage, kept.process), (Stage::Starting, None));
}

/// Devin's orchestration docs: `--gateway-url` serves a claim that carries
/// no `gateway_url`; the claim's own wins when it has one.
#[tokio::test]
async fn a_claim_without_a_gateway_uses_the_configured_one() {
    let mut world = World::new().await;
    let handle = world.sandbox().await;
    let mut bare = claim_response();
    bare.status.gateway_url = None;

    let mut runner =
        world.runner_claimed_with(record(Stage::Starting, Some(handle.clone())), bare.clone());
    assert_eq!(runner.gateway_url(), None);
    let err = runner.spawn_remote().await.unwrap_err();
    assert!(
        format!("{err:#}").contains("none is configured: set gateway_url"),
        "{err:#}"
    );
    assert!(runner.rec.process.is_none(), "nothing spawned");

    world.fallback_gateway = Some("wss://gateway.example.com/".into());
    let runner = world.runner_claimed_with(record(Stage::Starting, Some(handle.clone())), bare);
    assert_eq!(
        runner.gateway_url().as_deref(),
        Some("wss://gateway.example.com/")
    );
    let runner = world.runner_claimed_with(record(Stage::Starting, Some(handle)), claim_response());
    assert_eq!(runner.gateway_url().as_deref(), Some("http://127.0.0.1:9"));
}

#[tokio::test]
async fn a_session_past_claimed_is_left_to_its_claim_when_a_record_fails() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let rec = record(Stage::Starting, Some(handle));
    world.store.put_session(&rec).unwrap();
    world.store.fail_writes();

    assert_eq!(run(world.runner(rec)).await, RunnerEnd::RecordFailed);

    assert_eq!(world.releases(), 0);
    let kept = world
        .store
        .session(&fleet::SessionId::new(SESSION).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(kept.stage, Stage::Starting);
    assert!(kept.process.is_none());
}

/// A claim answer whose server clock reads `server_now` (its `updated_at`)
/// and whose deadline, in whole seconds as the reference server sends it,
/// is `lifetime_secs` later; `None`: no deadline at all.
fn answer_at(server_now: Millis, lifetime_secs: Option<i64>) -> QueueEntry {
    let whole = server_now.div_euclid(1000) * 1000;
    let mut entry = claim_response();
    entry.metadata.updated_at = Timestamp::from_unix_millis(whole);
    entry.status.claim_deadline =
        lifetime_secs.and_then(|s| Timestamp::from_unix_millis(whole + s * 1000));
    entry
}

fn next_action(runner: &SessionRunner) -> SessionAction {
    plan_session(&runner.observation(local_now()), &runner.deps.policy)
}

// Before the fix a claim answer without a deadline left `needs_renewal`
// true for good: the runner re-claimed as fast as answers came back and
// never started the session.
#[tokio::test]
async fn a_claim_answer_without_a_deadline_starts_the_session_instead_of_reclaiming() {
    let world = World::new().await;
    let mut runner =
        world.runner_claimed_with(record(Stage::Claimed, None), answer_at(now_ms(), None));
    assert_eq!(next_action(&runner), SessionAction::Start);
    assert!(runner.has_budget());

    // A renewal answered without a deadline is no reason to renew again.
    world.answer_claims(
        200,
        serde_json::to_value(answer_at(now_ms(), None)).unwrap(),
    );
    runner.renew().await.unwrap();
    assert_eq!(next_action(&runner), SessionAction::Start);
}

// Before the fix a 6 s claim never left the 10 s a slow step wanted, so the
// start gave up at once, again and again, and only renewals happened.
#[tokio::test]
async fn a_short_whole_second_claim_leaves_time_to_start() {
    let world = World::new().await;
    let runner =
        world.runner_claimed_with(record(Stage::Claimed, None), answer_at(now_ms(), Some(6)));
    assert_eq!(next_action(&runner), SessionAction::Start);
    assert!(runner.has_budget(), "a fresh 6 s claim must allow a start");
}

// Before the fix the deadline was compared with Garrison's own clock: a
// server minutes behind made every claim look expired (a renewal storm),
// one minutes ahead made it look longer than it is (an expired claim).
#[tokio::test]
async fn a_skewed_server_clock_neither_storms_nor_overstays() {
    let world = World::new().await;
    let behind = world.runner_claimed_with(
        record(Stage::Claimed, None),
        answer_at(now_ms() - 5 * 60_000, Some(300)),
    );
    assert_eq!(next_action(&behind), SessionAction::Start);
    assert!(behind.has_budget());

    let ahead = world.runner_claimed_with(
        record(Stage::Claimed, None),
        answer_at(now_ms() + 5 * 60_000, Some(300)),
    );
    let left = ahead.claim.time_left().unwrap();
    assert!(left <= 300_000, "the claim is taken to last {left} ms");
}

// Before the fix a 404 on renewal was a transient error, retried every
// second for as long as the runner lived.
#[tokio::test]
async fn a_404_on_renewal_means_the_entry_is_gone() {
    let world = World::new().await;
    let mut runner = world.runner(record(Stage::Claimed, None));
    world.answer_claims(404, serde_json::json!({"error": "not_found"}));

    runner.renew().await.unwrap();

    assert_eq!(runner.entry_obs, EntryObs::Gone);
    assert_eq!(
        next_action(&runner),
        SessionAction::Finish(Finish::Released)
    );
}

/// The remote's output as the host backend keeps it, written directly: as
/// large as the sandbox likes.
fn fake_output(world: &World, handle: &Handle, process: &str, bytes: &[u8]) -> ProcessRef {
    let dir = world
        .dir
        .path()
        .join("host/sandboxes")
        .join(&handle.name)
        .join("proc")
        .join(process);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(shim::OUTPUT_FILE), bytes).unwrap();
    ProcessRef { id: process.into() }
}

#[tokio::test]
async fn the_session_log_stops_at_its_cap_and_says_so_once() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let mut runner = world.runner(record(Stage::Running, Some(handle.clone())));
    let cap = 1 << 20;
    Arc::get_mut(&mut runner.deps)
        .unwrap()
        .policy
        .session_log_max_bytes = cap;
    let first = fake_output(&world, &handle, "p1", &vec![b'a'; 3 << 20]);
    runner.copy_output(&handle, &first).await;

    let log = world
        .dir
        .path()
        .join("sessions")
        .join(sandbox::hashed_id(SESSION));
    let copied = std::fs::read(log.join(crate::session_log::REMOTE_LOG)).unwrap();
    let text = String::from_utf8_lossy(&copied);
    let notice = "this log reached its cap of 1 MiB (session_log_max_mb)";
    assert_eq!(
        text.matches(notice).count(),
        1,
        "{}",
        &text[text.len() - 200..]
    );
    let before_notice = text.split("\n[garrison]").next().unwrap();
    assert_eq!(before_notice.len(), cap as usize);

    // A restarted remote (a new process, its output from offset 0) adds
    // nothing: the cap is the session's.
    runner.rec.output_offset = 0;
    let second = fake_output(&world, &handle, "p2", &vec![b'b'; 1 << 20]);
    runner.copy_output(&handle, &second).await;
    let after = std::fs::read(log.join(crate::session_log::REMOTE_LOG)).unwrap();
    assert_eq!(after.len(), copied.len());
    let events = std::fs::read_to_string(log.join(crate::session_log::EVENTS_LOG)).unwrap();
    assert_eq!(events.matches("output_capped").count(), 1, "{events}");
}

#[tokio::test]
async fn output_below_the_cap_is_copied_whole() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let mut runner = world.runner(record(Stage::Running, Some(handle.clone())));
    let process = fake_output(&world, &handle, "p1", b"hello\n");
    runner.copy_output(&handle, &process).await;
    let log = world
        .dir
        .path()
        .join("sessions")
        .join(sandbox::hashed_id(SESSION));
    let copied = std::fs::read_to_string(log.join(crate::session_log::REMOTE_LOG)).unwrap();
    assert_eq!(copied, "hello\n");
    assert_eq!(runner.rec.output_offset, 6);
}

/// Garrison killed while it destroyed a suspended session's sandbox (the
/// snapshot kept, the handle removed, the directory not yet): the restarted
/// runner cannot snapshot what is gone and must not retry for ever; it
/// clears the remains and gives the claim back.
#[tokio::test]
async fn a_suspend_cut_short_in_its_destroy_finishes_after_a_restart() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let remote = fake_output(&world, &handle, "remote-1", b"its last words\n");
    let remains = world.dir.path().join("host/sandboxes").join(&handle.name);
    std::fs::remove_file(remains.join("handle.json")).unwrap();
    let mut rec = record(Stage::Finishing(Finish::Suspended), Some(handle));
    rec.process = Some(remote);
    world.store.put_session(&rec).unwrap();

    assert_eq!(
        run(world.runner(rec)).await,
        RunnerEnd::Stage(Stage::Done(Finish::Suspended))
    );

    assert!(!remains.exists(), "the sandbox's remains are left");
    assert_eq!(world.releases(), 1);
    let events: Vec<String> = world
        .store
        .events(&fleet::SessionId::new(SESSION).unwrap(), 0)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(events.iter().any(|k| k == "snapshot_skipped"), "{events:?}");
}
