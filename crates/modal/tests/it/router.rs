//! What the backend does through the command router and with the V2 create,
//! against the mock: live network changes that keep the gateway, helper
//! errors told by their stderr, runtime and idle timeout at create.

use crate::common;

use modal::ModalBackend;
use modal::wire::network_access::NetworkAccessType;
use sandbox::{Resources, Sandbox, SandboxName, SandboxSpec};

fn spec(session: &str) -> SandboxSpec {
    SandboxSpec {
        name: SandboxName::for_session(session),
        labels: sandbox::session_labels(session, common::OUTPOST),
        image: None,
        restore_from: None,
        resources: Resources {
            cpus: 1.0,
            memory_mb: 1024,
            disk_mb: 1024,
        },
        network: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_policy_is_changed_on_the_running_sandbox_and_keeps_the_gateway() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let mut spec = spec("session-net");
    spec.network.gateway_url = Some("https://203.0.113.5:8443/gw".into());
    let handle = backend.create(&spec).await.unwrap();
    let before = setup.mock.sandbox(&handle.id).unwrap();
    assert_eq!(before.network_changes, 0);

    let policy = ::common::NetworkPolicy {
        enabled: true,
        allow: vec![::common::AllowRule::Ipv4("198.51.100.0/24".into())],
    };
    backend
        .update_network_policy(&handle, &policy)
        .await
        .unwrap();
    let after = setup.mock.sandbox(&handle.id).unwrap();
    assert_eq!(after.network_changes, 1);
    assert!(after.running, "changed live, not by a restart");
    let access = after.definition.network_access.unwrap();
    assert_eq!(
        access.network_access_type,
        NetworkAccessType::Allowlist as i32
    );
    assert_eq!(access.allowed_cidrs, ["203.0.113.5/32", "198.51.100.0/24"]);
    assert_eq!(setup.mock.calls("TaskSetNetworkAccess"), 1);
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_and_idle_timeout_reach_the_v2_create() {
    let setup = common::start(|_| {}).await;
    let mut settings = setup.settings.clone();
    settings.runtime = Some(modal::Runtime::Vm);
    settings.idle_timeout = Some(std::time::Duration::from_secs(900));
    let backend = ModalBackend::new(settings).unwrap();
    let handle = backend.create(&spec("session-runtime")).await.unwrap();
    let def = setup.mock.sandbox(&handle.id).unwrap().definition;
    assert_eq!(def.runtime.as_deref(), Some("vm"));
    assert_eq!(def.idle_timeout_secs, Some(900));
    assert_eq!(setup.mock.calls("SandboxCreateV2"), 1);
    assert_eq!(setup.mock.calls("SandboxCreate"), 0);
    assert_eq!(setup.mock.calls("ContainerExec"), 0);
    assert!(setup.mock.calls("TaskExecStart") > 0);
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_reports_stdout_and_stderr_apart_with_its_env() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let handle = backend.create(&spec("session-stderr")).await.unwrap();
    let client = modal::Client::new(&setup.settings.client).unwrap();
    let task = client
        .rpc()
        .sandbox_get_task_id_v2(modal::wire::SandboxGetTaskIdRequest {
            sandbox_id: handle.id.clone(),
            timeout: Some(10.0),
            wait_until_ready: false,
        })
        .await
        .unwrap()
        .into_inner()
        .task_id
        .unwrap();
    let command = modal::exec::Command {
        argv: vec![
            "sh".into(),
            "-c".into(),
            r#"echo "out $WHO"; echo "err $WHO" >&2; exit 3"#.into(),
        ],
        workdir: None,
        env: [("WHO".to_owned(), "me".to_owned())].into(),
    };
    let finished = modal::exec::run(&client, &task, &command, None, 1024)
        .await
        .unwrap();
    assert_eq!(finished.exit_code, 3);
    assert_eq!(finished.output, b"out me\n");
    assert_eq!(finished.stderr, b"err me\n");
    assert_eq!(finished.message(), "err me");
    // stdin by offset, read back whole.
    let cat = modal::exec::Command {
        argv: vec!["cat".into()],
        ..Default::default()
    };
    let echoed = modal::exec::run(&client, &task, &cat, Some(b"fed in"), 1024)
        .await
        .unwrap();
    assert_eq!(
        (echoed.exit_code, echoed.output.as_slice()),
        (0, &b"fed in"[..])
    );
    backend.destroy(&handle).await.unwrap();
}
