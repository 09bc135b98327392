//! Modal Secrets through `modal::secret` against the mock: written,
//! overwritten, found, deleted, and given to the processes of a sandbox
//! created with them (and only of that one).

use crate::common;

use std::collections::BTreeMap;

use modal::exec::{self, Command};
use modal::{Client, wire};

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Creates a sandbox in a fresh app with `secret_ids`, returns its task.
async fn sandbox_with(
    client: &Client,
    mock: &modal_mock::MockModal,
    secret_ids: Vec<String>,
) -> String {
    let mut rpc = client.rpc();
    let app_id = rpc
        .app_get_or_create(wire::AppGetOrCreateRequest {
            app_name: "secrets-test".into(),
            environment_name: String::new(),
            object_creation_type: wire::ObjectCreationType::CreateIfMissing as i32,
        })
        .await
        .unwrap()
        .into_inner()
        .app_id;
    let sandbox_id = rpc
        .sandbox_create(wire::SandboxCreateRequest {
            app_id,
            definition: Some(wire::Sandbox {
                entrypoint_args: vec!["sleep".into(), "infinity".into()],
                image_id: mock.base_image_id(),
                secret_ids,
                timeout_secs: 600,
                ..Default::default()
            }),
            tags: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .sandbox_id;
    rpc.sandbox_get_task_id(wire::SandboxGetTaskIdRequest {
        sandbox_id,
        timeout: Some(10.0),
        wait_until_ready: false,
    })
    .await
    .unwrap()
    .into_inner()
    .task_id
    .unwrap()
}

async fn env_of(client: &Client, task: &str) -> String {
    let done = exec::run(
        client,
        task,
        &Command {
            argv: vec!["env".into()],
            workdir: None,
            env: Default::default(),
        },
        None,
        1 << 20,
    )
    .await
    .unwrap();
    String::from_utf8(done.output).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_is_written_found_overwritten_used_by_its_sandbox_only_and_deleted() {
    let setup = common::start(|_| {}).await;
    let client = Client::new(&setup.settings.client).unwrap();

    assert_eq!(
        modal::secret::lookup(&client, "deploy-env", "")
            .await
            .unwrap(),
        None
    );
    let id = modal::secret::put(
        &client,
        "deploy-env",
        "",
        &env(&[("TOKEN_A", "first-value"), ("OLD", "gone-later")]),
    )
    .await
    .unwrap();
    assert!(id.starts_with("st-"), "{id}");
    assert_eq!(
        modal::secret::lookup(&client, "deploy-env", "")
            .await
            .unwrap(),
        Some(id.clone())
    );
    // Overwritten in place: the same id, exactly the new contents.
    let again = modal::secret::put(
        &client,
        "deploy-env",
        "",
        &env(&[("TOKEN_A", "second-value")]),
    )
    .await
    .unwrap();
    assert_eq!(again, id);
    assert_eq!(setup.mock.secret_names(), ["deploy-env"]);

    let with = sandbox_with(&client, &setup.mock, vec![id.clone()]).await;
    let without = sandbox_with(&client, &setup.mock, Vec::new()).await;
    let seen = env_of(&client, &with).await;
    assert!(seen.contains("TOKEN_A=second-value"), "{seen}");
    assert!(!seen.contains("OLD="), "{seen}");
    let other = env_of(&client, &without).await;
    assert!(!other.contains("TOKEN_A"), "{other}");

    assert!(
        modal::secret::delete(&client, "deploy-env", "")
            .await
            .unwrap()
    );
    assert!(
        !modal::secret::delete(&client, "deploy-env", "")
            .await
            .unwrap()
    );
    assert!(setup.mock.secret_names().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_with_an_unknown_secret_is_refused() {
    let setup = common::start(|_| {}).await;
    let client = Client::new(&setup.settings.client).unwrap();
    let mut rpc = client.rpc();
    let app_id = rpc
        .app_get_or_create(wire::AppGetOrCreateRequest {
            app_name: "secrets-test".into(),
            environment_name: String::new(),
            object_creation_type: wire::ObjectCreationType::CreateIfMissing as i32,
        })
        .await
        .unwrap()
        .into_inner()
        .app_id;
    let err = rpc
        .sandbox_create(wire::SandboxCreateRequest {
            app_id,
            definition: Some(wire::Sandbox {
                entrypoint_args: vec!["sleep".into(), "infinity".into()],
                image_id: setup.mock.base_image_id(),
                secret_ids: vec!["st-unknown".into()],
                timeout_secs: 600,
                ..Default::default()
            }),
            tags: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(setup.mock.sandboxes().is_empty());
}
