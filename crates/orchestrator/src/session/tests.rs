//! What a failed write to the state store stops: the runner against a real
//! store made read-only, the host backend, and a fleet API that only
//! answers (and counts) requests.

use std::sync::Mutex;

use fleet::{EntryMetadata, EntrySpec, EntryStatus, Phase, SessionKind, SessionStatus, Timestamp};
use sandbox::host::{HostBackend, HostConfig};
use sandbox::{Handle, SandboxName, SandboxSpec};
use sha2::{Digest, Sha256};

use super::*;
use crate::redact::Redactor;
use crate::settings::Repos;

const SESSION: &str = "s1";
const SHA: &str = "abcdef1";

struct World {
    dir: tempfile::TempDir,
    store: Arc<Store>,
    backend: Arc<HostBackend>,
    /// `METHOD path` of every request the fleet API got.
    requests: Arc<Mutex<Vec<String>>>,
    api_url: String,
}

impl World {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("garrison.db")).unwrap());
        let backend = Arc::new(
            HostBackend::new(HostConfig {
                root: dir.path().join("host"),
                snapshot_dir: dir.path().join("snapshots"),
                shim_exe: "/nonexistent".into(),
            })
            .unwrap(),
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(format!("{} {}", req.method(), req.uri().path()));
                axum::Json(serde_json::json!({}))
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
            api_url,
        }
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
        let deps = Deps {
            client: FleetClient::new(&self.api_url, "token".into(), Default::default()).unwrap(),
            backend: self.backend.clone(),
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
            stopping: CancellationToken::new(),
            drain: false,
            operator_stops: Arc::new(OperatorStops::default()),
        };
        SessionRunner::claimed(Arc::new(deps), rec, claim_response())
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
        self.backend
            .create(&SandboxSpec {
                name: SandboxName::for_session(SESSION),
                labels: sandbox::session_labels(SESSION, "o"),
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
            session_id: SESSION.into(),
            outpost_id: "o".into(),
            ..Default::default()
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
    let mut rec = SessionRecord::new(SESSION, "o", SessionKind::New, "host", now_ms());
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
    let kept = world.store.session(SESSION).unwrap().unwrap();
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

    assert!(err.downcast_ref::<RecordFailed>().is_some(), "{err:#}");
    let process = runner.rec.process.clone().unwrap();
    // The host backend makes a process's directory before anything else.
    let status = world.backend.status(&handle, &process).await;
    assert!(matches!(&status, Err(e) if e.is_gone()), "{status:?}");
    let kept = world.store.session(SESSION).unwrap().unwrap();
    assert_eq!((kept.stage, kept.process), (Stage::Starting, None));
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
    let kept = world.store.session(SESSION).unwrap().unwrap();
    assert_eq!(kept.stage, Stage::Starting);
    assert!(kept.process.is_none());
}
