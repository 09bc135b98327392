//! What the Modal backend asks of Modal, beyond the conformance suite:
//! resources, region, timeout, network policy and tags on create; expired
//! snapshots; retries; credentials.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use ::common::Secret;
use modal::ModalBackend;
use modal::wire::network_access::NetworkAccessType;
use sandbox::{ProcessSpec, Resources, Sandbox, SandboxError, SandboxName, SandboxSpec};

fn spec(session: &str) -> SandboxSpec {
    SandboxSpec {
        name: SandboxName::for_session(session),
        labels: sandbox::session_labels(session, common::OUTPOST),
        image: None,
        restore_from: None,
        resources: Resources {
            cpus: 1.5,
            memory_mb: 3072,
            disk_mb: 1024,
        },
        network: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_passes_resources_region_timeout_policy_and_tags() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let mut spec = spec("session-create");
    spec.network = sandbox::NetworkSpec {
        policy: ::common::NetworkPolicy {
            enabled: true,
            allow: vec![::common::AllowRule::Ipv4("198.51.100.0/24".into())],
        },
        gateway_url: Some("https://203.0.113.5:8443/gw".into()),
    };
    let handle = backend.create(&spec).await.unwrap();
    let view = setup.mock.sandbox(&handle.id).unwrap();
    let def = &view.definition;
    let resources = def.resources.unwrap();
    assert_eq!((resources.milli_cpu, resources.memory_mb), (1500, 3072));
    assert_eq!(def.timeout_secs, 3600);
    assert_eq!(
        def.scheduler_placement.as_ref().unwrap().regions,
        ["us-east"]
    );
    assert_eq!(def.name.as_deref(), Some(spec.name.as_str()));
    let network = def.network_access.as_ref().unwrap();
    assert_eq!(
        network.network_access_type,
        NetworkAccessType::Allowlist as i32
    );
    assert_eq!(network.allowed_cidrs, ["203.0.113.5/32", "198.51.100.0/24"]);
    let tags: BTreeMap<_, _> = view.tags.iter().cloned().collect();
    assert_eq!(tags["garrison.session_id"], "session-create");
    assert_eq!(tags["garrison.outpost_id"], common::OUTPOST);
    assert_eq!(
        handle.image.as_deref(),
        Some(setup.mock.base_image_id().as_str())
    );
    backend.destroy(&handle).await.unwrap();
    assert!(!setup.mock.sandbox(&handle.id).unwrap().running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostnames_and_a_named_gateway_go_in_the_domain_allowlist() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let mut spec = spec("session-domains");
    spec.network = sandbox::NetworkSpec {
        policy: ::common::NetworkPolicy {
            enabled: true,
            allow: vec![::common::AllowRule::Hostname("*.github.com".into())],
        },
        gateway_url: Some("wss://gateway.devin.example/ws".into()),
    };
    let handle = backend.create(&spec).await.unwrap();
    let def = setup.mock.sandbox(&handle.id).unwrap().definition;
    let network = def.network_access.unwrap();
    assert_eq!(
        network.network_access_type,
        NetworkAccessType::Allowlist as i32
    );
    assert!(network.allowed_cidrs.is_empty());
    assert_eq!(
        network.allowed_domains,
        ["gateway.devin.example", "*.github.com"]
    );
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enabled_policy_with_nothing_reachable_blocks_the_network() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let mut spec = spec("session-blocked");
    spec.network.policy = ::common::NetworkPolicy {
        enabled: true,
        allow: vec![::common::AllowRule::Ipv4("not an address".into())],
    };
    let handle = backend.create(&spec).await.unwrap();
    let def = setup.mock.sandbox(&handle.id).unwrap().definition;
    assert_eq!(
        def.network_access.unwrap().network_access_type,
        NetworkAccessType::Blocked as i32
    );
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_snapshot_is_gone_and_the_base_image_still_works() {
    let setup = common::start(|c| c.snapshot_ttl = Some(Duration::from_secs(3600))).await;
    let backend = setup.backend();
    let handle = backend.create(&spec("session-expiry")).await.unwrap();
    let snapshot = backend.snapshot(&handle).await.unwrap();
    backend.destroy(&handle).await.unwrap();
    assert!(backend.snapshot_exists(&snapshot).await.unwrap());
    setup.mock.advance_clock(Duration::from_secs(3601));
    assert!(!backend.snapshot_exists(&snapshot).await.unwrap());
    let mut resume = spec("session-expiry");
    resume.restore_from = Some(snapshot.clone());
    match backend.create(&resume).await {
        Err(e) => assert!(e.is_gone(), "{e}"),
        Ok(_) => panic!("restored from an expired snapshot"),
    }
    // What the orchestrator does next: start from the base image.
    resume.restore_from = None;
    let fresh = backend.create(&resume).await.unwrap();
    backend.destroy(&fresh).await.unwrap();
    // Deleting an expired snapshot is not an error.
    backend.delete_snapshot(&snapshot).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_codes_are_retried_and_others_are_not() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    setup
        .mock
        .fail_next("SandboxCreateV2", tonic::Code::Unavailable, 1);
    setup
        .mock
        .fail_next("SandboxCreateV2", tonic::Code::ResourceExhausted, 1);
    let handle = backend.create(&spec("session-retry")).await.unwrap();
    assert_eq!(setup.mock.calls("SandboxCreateV2"), 3);

    setup
        .mock
        .fail_next("SandboxList", tonic::Code::PermissionDenied, 1);
    let err = backend.list().await.unwrap_err();
    assert!(matches!(err, SandboxError::Fatal(_)), "{err}");
    assert_eq!(setup.mock.calls("SandboxList"), 1);

    // Retries run out: the error is transient, for the orchestrator to retry later.
    setup
        .mock
        .fail_next("TaskSnapshotFilesystem", tonic::Code::Unavailable, 4);
    let err = backend.snapshot(&handle).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert_eq!(setup.mock.calls("TaskSnapshotFilesystem"), 4);

    // A code that says the request is wrong is not retried.
    setup
        .mock
        .fail_next("SandboxCreateV2", tonic::Code::InvalidArgument, 1);
    assert!(backend.create(&spec("session-once")).await.is_err());
    assert_eq!(setup.mock.calls("SandboxCreateV2"), 4);
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_is_retried_without_a_second_sandbox() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    // The sandbox is made, then the answer is lost: the retry carries the
    // same x-idempotency-key, so the mock answers with the same sandbox.
    setup.mock.lose_next_answers("SandboxCreateV2", 1);
    let handle = backend.create(&spec("session-lost")).await.unwrap();
    assert_eq!(setup.mock.calls("SandboxCreateV2"), 2);
    assert_eq!(setup.mock.create_retry_attempts(), [Some(0), Some(1)]);
    let made = setup.mock.sandboxes();
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0].id, handle.id);
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused() {
    let setup = common::start(|_| {}).await;
    let mut settings = setup.settings.clone();
    settings.client.credentials.token_secret = Secret::new("as-wrong");
    let backend = ModalBackend::new(settings).unwrap();
    let err = backend.create(&spec("session-auth")).await.unwrap_err();
    assert!(format!("{err}").contains("Unauthenticated"), "{err}");
    assert!(setup.mock.sandboxes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_never_see_the_modal_token() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let handle = backend.create(&spec("session-token")).await.unwrap();
    let process = backend
        .spawn(
            &handle,
            &ProcessSpec {
                name: "env".into(),
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "env; cat /proc/$PPID/environ /proc/$$/cmdline | tr '\\0' '\\n'".into(),
                ],
                env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
                cwd: handle.workdir.clone(),
            },
        )
        .await
        .unwrap();
    sandbox::wait_exit(
        backend.as_ref(),
        &handle,
        &process,
        Duration::from_millis(20),
    )
    .await
    .unwrap();
    let out = backend
        .read_output(&handle, &process, 0, 1 << 20)
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&out.data);
    assert!(out.contains("PATH=/usr/bin:/bin"), "{out}");
    for secret in [setup.mock.token_id(), setup.mock.token_secret()] {
        assert!(!out.contains(secret), "{out}");
    }
    backend.destroy(&handle).await.unwrap();
}
