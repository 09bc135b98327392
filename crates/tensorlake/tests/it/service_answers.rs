//! The client and the backend against the mock answering as the live
//! service does (issue "Tensorlake as the live service behaves"): where
//! lifecycle calls go, the blocking create's 504 and 422, paged listings
//! and names, the proxy's retry codes, snapshots at `local_ready`, the PTY
//! token header and output read by offset from the follow stream.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{KEY, World};
use sandbox::{ProcessSpec, ProcessStatus, Resources, Sandbox, SandboxName, SandboxSpec};
use tensorlake::models::{CreatePty, CreateSandbox, Resources as TlResources};
use tensorlake::{Client, Secret};
use tensorlake_mock::{CreateOutcome, Fault};

/// Bounds a wait that should end; never an assertion about speed.
const GUARD: Duration = Duration::from_secs(60);

fn client(world: &World) -> Client {
    let config = world.config();
    Client::with_retry(&config.api_url, Secret::new(KEY), config.retry).unwrap()
}

fn request(name: Option<&str>) -> CreateSandbox {
    CreateSandbox {
        image: None,
        resources: TlResources {
            cpus: 1.0,
            memory_mb: 512,
            disk_mb: None,
        },
        timeout_secs: None,
        network: None,
        snapshot_id: None,
        name: name.map(str::to_owned),
        auto_resume: Some(false),
    }
}

fn spec(session: &str) -> SandboxSpec {
    SandboxSpec {
        name: SandboxName::for_session(session),
        labels: sandbox::session_labels(session, "outpost_test"),
        image: None,
        restore_from: None,
        resources: Resources {
            cpus: 1.0,
            memory_mb: 1024,
            disk_mb: 2048,
        },
        network: Default::default(),
    }
}

fn sh(name: &str, workdir: &str, script: &str) -> ProcessSpec {
    ProcessSpec {
        name: name.into(),
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
        cwd: workdir.into(),
    }
}

fn fault(method: &str, path_prefix: &str, status: u16, code: &str) -> Fault {
    Fault {
        method: Some(method.into()),
        path_prefix: path_prefix.into(),
        status,
        code: Some(code.into()),
        times: 1,
        retry_after_secs: None,
    }
}

#[tokio::test]
async fn lifecycle_calls_go_to_the_sandbox_api_url() {
    let world = World::start().await;
    // Nothing listens on the API URL: only the sandbox API answers.
    let nowhere = "http://127.0.0.1:9";
    let direct = Client::new(nowhere, Secret::new(KEY)).unwrap();
    assert!(direct.list_sandboxes().await.is_err());
    let client = Client::new(nowhere, Secret::new(KEY))
        .unwrap()
        .with_sandbox_api_url(Some(world.mock.url()))
        .unwrap();
    client
        .create_sandbox(&request(Some("routed")))
        .await
        .unwrap();
    assert_eq!(client.list_sandboxes().await.unwrap().len(), 1);

    let mut config = world.config();
    config.api_url = nowhere.into();
    config.sandbox_api_url = Some(world.mock.url().to_owned());
    let backend = tensorlake::TensorlakeBackend::new(config).unwrap();
    let handle = backend.create(&spec("routed-backend")).await.unwrap();
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test]
async fn a_create_answered_504_waits_for_the_queued_sandbox_instead_of_creating_again() {
    let world = World::start().await;
    let backend = world.backend();
    world
        .mock
        .next_create(CreateOutcome::Timeout { pending_ms: 500 });
    let handle = backend.create(&spec("capacity")).await.unwrap();
    assert_eq!(world.mock.status(&handle.id).as_deref(), Some("running"));
    assert_eq!(world.mock.requests_exact("POST", "/sandboxes"), 1);
    assert_eq!(
        world
            .mock
            .requests_exact("DELETE", &format!("/sandboxes/{}", handle.id)),
        0
    );
    // The grace the SDK asks for under its five-minute timeout.
    assert_eq!(world.mock.create_graces(), vec![Some(5000)]);
}

#[tokio::test]
async fn a_create_answered_422_is_a_failed_start_and_leaves_nothing() {
    let world = World::start().await;
    let backend = world.backend();
    world.mock.next_create(CreateOutcome::Failed);
    let spec = spec("doomed");
    let error = backend.create(&spec).await.unwrap_err();
    assert!(!error.is_transient(), "{error}");
    assert!(error.to_string().contains("failed to start"), "{error}");
    assert_eq!(world.mock.requests_exact("POST", "/sandboxes"), 1);
    assert!(
        client(&world)
            .find_by_name(spec.name.as_str())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn listings_follow_the_cursor_and_names_are_looked_up_directly() {
    let world = World::start().await;
    let client = client(&world);
    for _ in 0..105 {
        client.create_sandbox(&request(None)).await.unwrap();
    }
    client
        .create_sandbox(&request(Some("holder")))
        .await
        .unwrap();
    let before = world.mock.requests_exact("GET", "/sandboxes");
    assert_eq!(client.list_sandboxes().await.unwrap().len(), 106);
    // Two pages of at most 100.
    assert_eq!(world.mock.requests_exact("GET", "/sandboxes") - before, 2);

    let listings = world.mock.requests_exact("GET", "/sandboxes");
    let holder = client.find_by_name("holder").await.unwrap().unwrap();
    assert_eq!(holder.name.as_deref(), Some("holder"));
    assert!(client.find_by_name("nobody").await.unwrap().is_none());
    assert_eq!(world.mock.requests_exact("GET", "/sandboxes"), listings);
}

#[tokio::test]
async fn only_the_proxys_undelivered_codes_on_a_5xx_are_retried() {
    let world = World::start().await;
    let backend = world.backend();
    let handle = backend.create(&spec("retries")).await.unwrap();
    let starts = || world.mock.requests_exact("POST", "/api/v1/processes");
    for code in [
        "SANDBOX_NOT_READY",
        "SANDBOX_UNREACHABLE",
        "AUTH_SERVICE_UNAVAILABLE",
    ] {
        let before = starts();
        world
            .mock
            .inject(fault("POST", "/api/v1/processes", 503, code));
        let name = format!("p-{}", code.to_lowercase().replace('_', "-"));
        backend
            .spawn(&handle, &sh(&name, &handle.workdir, "true"))
            .await
            .unwrap();
        assert_eq!(starts() - before, 2, "{code} was not retried once");
    }
    // The same code on a 4xx is the proxy passing a real answer on.
    let before = starts();
    world
        .mock
        .inject(fault("POST", "/api/v1/processes", 409, "SANDBOX_NOT_READY"));
    assert!(
        backend
            .spawn(&handle, &sh("p-4xx", &handle.workdir, "true"))
            .await
            .is_err()
    );
    assert_eq!(starts() - before, 1);
    // A plain 503 after a start may have started it: not retried.
    let before = starts();
    world
        .mock
        .inject(fault("POST", "/api/v1/processes", 503, "INTERNAL"));
    assert!(
        backend
            .spawn(&handle, &sh("p-503", &handle.workdir, "true"))
            .await
            .is_err()
    );
    assert_eq!(starts() - before, 1);
}

#[tokio::test]
async fn suspend_and_resume_ask_the_service_to_answer_once_done() {
    let world = World::start().await;
    let backend = world.backend();
    let handle = backend.create(&spec("waits")).await.unwrap();
    backend.suspend(&handle).await.unwrap();
    assert_eq!(world.mock.status(&handle.id).as_deref(), Some("suspended"));
    backend.resume(&handle).await.unwrap();
    assert_eq!(world.mock.status(&handle.id).as_deref(), Some("running"));
    assert_eq!(
        world.mock.lifecycle_waits(),
        vec![Some(30_000), Some(30_000)]
    );
}

#[tokio::test]
async fn a_snapshot_is_used_at_local_ready() {
    // Replication takes long enough to be seen not done.
    let world = World::start_with(|c| c.transition = Duration::from_secs(3)).await;
    let backend = world.backend();
    let handle = backend.create(&spec("snap")).await.unwrap();
    let snapshot = backend.snapshot(&handle).await.unwrap();
    assert_eq!(
        world.mock.snapshot_status(&snapshot.id).as_deref(),
        Some("local_ready")
    );
    assert!(backend.snapshot_exists(&snapshot).await.unwrap());
}

#[tokio::test]
async fn the_pty_token_travels_in_its_header() {
    let world = World::start().await;
    let backend = world.backend();
    let handle = backend.create(&spec("pty-token")).await.unwrap();
    let dp = backend.client().sandbox(&handle.id, None).unwrap();
    let session = dp
        .create_pty(&CreatePty {
            command: "/bin/sh".into(),
            args: vec!["-c".into(), "exit 0".into()],
            env: BTreeMap::new(),
            working_dir: Some(handle.workdir.clone()),
            rows: 24,
            cols: 80,
        })
        .await
        .unwrap();
    let _pty = dp.connect_pty(&session).await.unwrap();
    assert_eq!(world.mock.pty_token_carriers(), vec!["header"]);
}

#[tokio::test]
async fn output_is_read_by_offset_from_the_follow_stream() {
    let world = World::start().await;
    let backend = world.backend();
    let handle = backend.create(&spec("offsets")).await.unwrap();
    let script = "i=0; while [ $i -lt 300 ]; do echo line-$i; i=$((i+1)); done";
    let process = backend
        .spawn(&handle, &sh("lines", &handle.workdir, script))
        .await
        .unwrap();
    let status = tokio::time::timeout(
        GUARD,
        sandbox::wait_exit(
            backend.as_ref(),
            &handle,
            &process,
            Duration::from_millis(20),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, ProcessStatus::Exited(0));
    let expected: String = (0..300).map(|i| format!("line-{i}\n")).collect();
    // Small chunks, each from where the last ended.
    let mut read = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = backend
            .read_output(&handle, &process, offset, 100)
            .await
            .unwrap();
        if chunk.data.is_empty() {
            break;
        }
        assert!(chunk.data.len() <= 100);
        offset = chunk.next_offset;
        read.extend(chunk.data);
    }
    assert_eq!(String::from_utf8(read).unwrap(), expected);
    // An earlier offset again (a restarted orchestrator) reads the same.
    let again = backend.read_output(&handle, &process, 7, 10).await.unwrap();
    assert_eq!(again.data, &expected.as_bytes()[7..17]);
    // Never the whole output at once.
    let whole = format!("/api/v1/processes/{}/output", process.id);
    assert_eq!(world.mock.requests_exact("GET", &whole), 0);
}
