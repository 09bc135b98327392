//! The mock's own contract: Modal's auth metadata, streamed exec output,
//! expiring snapshot images, injected faults and image builds.

use std::time::Duration;

use modal::wire::{self, modal_client_client::ModalClientClient};
use modal_mock::{MockConfig, MockModal};
use tonic::Request;
use tonic::transport::Channel;

async fn mock(dir: &tempfile::TempDir) -> MockModal {
    let mut config = MockConfig::new(dir.path());
    config.snapshot_ttl = Some(Duration::from_secs(60));
    MockModal::start(config).await.unwrap()
}

async fn raw(mock: &MockModal) -> ModalClientClient<Channel> {
    ModalClientClient::connect(mock.url()).await.unwrap()
}

fn authed<T>(mock: &MockModal, message: T) -> Request<T> {
    let mut request = Request::new(message);
    let md = request.metadata_mut();
    md.insert(wire::HEADER_TOKEN_ID, mock.token_id().parse().unwrap());
    md.insert(
        wire::HEADER_TOKEN_SECRET,
        mock.token_secret().parse().unwrap(),
    );
    md.insert(
        wire::HEADER_CLIENT_VERSION,
        wire::CLIENT_VERSION.parse().unwrap(),
    );
    request
}

fn app_request() -> wire::AppGetOrCreateRequest {
    wire::AppGetOrCreateRequest {
        app_name: "garrison-test".into(),
        environment_name: String::new(),
        object_creation_type: wire::ObjectCreationType::CreateIfMissing as i32,
    }
}

async fn sandbox(mock: &MockModal, rpc: &mut ModalClientClient<Channel>) -> (String, String) {
    let app_id = rpc
        .app_get_or_create(authed(mock, app_request()))
        .await
        .unwrap()
        .into_inner()
        .app_id;
    let created = rpc
        .sandbox_create(authed(
            mock,
            wire::SandboxCreateRequest {
                app_id,
                definition: Some(wire::Sandbox {
                    entrypoint_args: vec!["sleep".into(), "infinity".into()],
                    image_id: mock.base_image_id(),
                    timeout_secs: 600,
                    ..Default::default()
                }),
                tags: Vec::new(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let task = rpc
        .sandbox_get_task_id(authed(
            mock,
            wire::SandboxGetTaskIdRequest {
                sandbox_id: created.sandbox_id.clone(),
                timeout: Some(10.0),
                wait_until_ready: false,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    (created.sandbox_id, task.task_id.unwrap())
}

#[tokio::test]
async fn calls_without_modal_credentials_are_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    let err = rpc.app_get_or_create(app_request()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let mut wrong = authed(&mock, app_request());
    wrong
        .metadata_mut()
        .insert(wire::HEADER_TOKEN_SECRET, "as-wrong".parse().unwrap());
    let err = rpc.app_get_or_create(wrong).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let mut no_version = authed(&mock, app_request());
    no_version
        .metadata_mut()
        .remove(wire::HEADER_CLIENT_VERSION);
    let err = rpc.app_get_or_create(no_version).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(mock.calls("AppGetOrCreate"), 0);

    rpc.app_get_or_create(authed(&mock, app_request()))
        .await
        .unwrap();
}

#[tokio::test]
async fn exec_output_comes_in_numbered_batches_ending_with_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    let (_, task_id) = sandbox(&mock, &mut rpc).await;
    let exec_id = rpc
        .container_exec(authed(
            &mock,
            wire::ContainerExecRequest {
                task_id,
                command: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "echo one; sleep 0.2; echo two; exit 4".into(),
                ],
                stdout_output: wire::ExecOutputOption::Pipe as i32,
                stderr_output: wire::ExecOutputOption::Pipe as i32,
                timeout_secs: 0,
                workdir: None,
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .exec_id;
    let read = |last| wire::ContainerExecGetOutputRequest {
        exec_id: exec_id.clone(),
        timeout: 30.0,
        last_batch_index: last,
        file_descriptor: wire::FileDescriptor::Stdout as i32,
        get_raw_bytes: true,
    };
    let mut stream = rpc
        .container_exec_get_output(authed(&mock, read(0)))
        .await
        .unwrap()
        .into_inner();
    let mut batches = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        batches.push(batch);
    }
    let text: String = batches
        .iter()
        .flat_map(|b| &b.items)
        .map(|i| String::from_utf8_lossy(&i.message_bytes).into_owned())
        .collect();
    assert_eq!(text, "one\ntwo\n");
    let last = batches.last().unwrap();
    assert_eq!(last.exit_code, Some(4));
    let indexes: Vec<u64> = batches.iter().map(|b| b.batch_index).collect();
    assert!(indexes.windows(2).all(|w| w[0] < w[1]), "{indexes:?}");

    // Resuming after the first batch returns only what followed it.
    let mut stream = rpc
        .container_exec_get_output(authed(&mock, read(batches[0].batch_index)))
        .await
        .unwrap()
        .into_inner();
    let mut again = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        again.push(batch);
    }
    assert_eq!(again.len(), batches.len() - 1);

    let waited = rpc
        .container_exec_wait(authed(
            &mock,
            wire::ContainerExecWaitRequest {
                exec_id: exec_id.clone(),
                timeout: 10.0,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((waited.completed, waited.exit_code), (true, Some(4)));
}

#[tokio::test]
async fn exec_stdin_is_fed_in_message_order() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    let (_, task_id) = sandbox(&mock, &mut rpc).await;
    let exec_id = rpc
        .container_exec(authed(
            &mock,
            wire::ContainerExecRequest {
                task_id,
                command: vec!["cat".into()],
                stdout_output: wire::ExecOutputOption::Pipe as i32,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .exec_id;
    for (index, text, eof) in [(2, "b", true), (1, "a", false), (1, "a", false)] {
        rpc.container_exec_put_input(authed(
            &mock,
            wire::ContainerExecPutInputRequest {
                exec_id: exec_id.clone(),
                input: Some(wire::RuntimeInputMessage {
                    message: text.into(),
                    message_index: index,
                    eof,
                }),
            },
        ))
        .await
        .unwrap();
    }
    let mut stream = rpc
        .container_exec_get_output(authed(
            &mock,
            wire::ContainerExecGetOutputRequest {
                exec_id,
                timeout: 30.0,
                last_batch_index: 0,
                file_descriptor: wire::FileDescriptor::Stdout as i32,
                get_raw_bytes: true,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        out.extend(batch.items.into_iter().flat_map(|i| i.message_bytes));
    }
    assert_eq!(out, b"ab");
}

#[tokio::test]
async fn snapshot_images_expire_and_then_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    let (sandbox_id, _) = sandbox(&mock, &mut rpc).await;
    let image_id = rpc
        .sandbox_snapshot_fs(authed(
            &mock,
            wire::SandboxSnapshotFsRequest {
                sandbox_id,
                timeout: 30.0,
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .image_id;
    let from_id = || {
        authed(
            &mock,
            wire::ImageFromIdRequest {
                image_id: image_id.clone(),
            },
        )
    };
    rpc.image_from_id(from_id()).await.unwrap();
    mock.advance_clock(Duration::from_secs(59));
    rpc.image_from_id(from_id()).await.unwrap();
    mock.advance_clock(Duration::from_secs(2));
    assert_eq!(
        rpc.image_from_id(from_id()).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let delete = authed(
        &mock,
        wire::ImageDeleteRequest {
            image_id: image_id.clone(),
        },
    );
    assert_eq!(
        rpc.image_delete(delete).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
}

#[tokio::test]
async fn injected_faults_fail_the_next_calls_then_clear() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    mock.fail_next("AppGetOrCreate", tonic::Code::Unavailable, 2);
    for _ in 0..2 {
        let err = rpc
            .app_get_or_create(authed(&mock, app_request()))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
    }
    rpc.app_get_or_create(authed(&mock, app_request()))
        .await
        .unwrap();
    assert_eq!(mock.calls("AppGetOrCreate"), 3);
}

#[tokio::test]
async fn terminate_ends_the_sandbox_and_its_processes() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    let (sandbox_id, task_id) = sandbox(&mock, &mut rpc).await;
    let exec_id = rpc
        .container_exec(authed(
            &mock,
            wire::ContainerExecRequest {
                task_id: task_id.clone(),
                command: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "setsid sleep 1000 & wait".into(),
                ],
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .exec_id;
    rpc.sandbox_terminate(authed(
        &mock,
        wire::SandboxTerminateRequest {
            sandbox_id: sandbox_id.clone(),
        },
    ))
    .await
    .unwrap();
    let waited = rpc
        .container_exec_wait(authed(
            &mock,
            wire::ContainerExecWaitRequest {
                exec_id,
                timeout: 30.0,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(waited.completed);
    let task = rpc
        .sandbox_get_task_id(authed(
            &mock,
            wire::SandboxGetTaskIdRequest {
                sandbox_id: sandbox_id.clone(),
                timeout: Some(1.0),
                wait_until_ready: false,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        task.task_result.unwrap().status,
        wire::generic_result::GenericStatus::Terminated as i32
    );
    let exec = rpc
        .container_exec(authed(
            &mock,
            wire::ContainerExecRequest {
                task_id,
                command: vec!["true".into()],
                ..Default::default()
            },
        ))
        .await;
    assert_eq!(exec.unwrap_err().code(), tonic::Code::FailedPrecondition);
    let listed = rpc
        .sandbox_list(authed(&mock, wire::SandboxListRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sandboxes.is_empty());
}

#[tokio::test]
async fn image_builds_record_their_commands_and_stream_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    let app_id = rpc
        .app_get_or_create(authed(&mock, app_request()))
        .await
        .unwrap()
        .into_inner()
        .app_id;
    let commands = vec![
        "FROM debian:bookworm-slim".to_owned(),
        "RUN true".to_owned(),
    ];
    let build = || {
        authed(
            &mock,
            wire::ImageGetOrCreateRequest {
                image: Some(wire::Image {
                    base_images: Vec::new(),
                    dockerfile_commands: commands.clone(),
                }),
                app_id: app_id.clone(),
                force_build: false,
                builder_version: wire::IMAGE_BUILDER_VERSION.into(),
            },
        )
    };
    let image_id = rpc
        .image_get_or_create(build())
        .await
        .unwrap()
        .into_inner()
        .image_id;
    // The same recipe is the same image.
    assert_eq!(
        rpc.image_get_or_create(build())
            .await
            .unwrap()
            .into_inner()
            .image_id,
        image_id
    );
    let mut stream = rpc
        .image_join_streaming(authed(
            &mock,
            wire::ImageJoinStreamingRequest {
                image_id: image_id.clone(),
                timeout: 30.0,
                last_entry_id: String::new(),
                include_logs_for_finished: true,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let mut logs = String::new();
    let mut result = None;
    while let Some(item) = stream.message().await.unwrap() {
        logs.extend(item.task_logs.iter().map(|l| l.data.clone()));
        if item.result.is_some() {
            result = item.result;
        }
    }
    assert!(logs.contains("RUN true"), "{logs}");
    assert_eq!(
        result.unwrap().status,
        wire::generic_result::GenericStatus::Success as i32
    );
    assert_eq!(mock.image(&image_id).unwrap().dockerfile_commands, commands);
}

/// Whether `pid` is a running process: neither gone, nor a zombie (the
/// host may not reap it), nor stopped.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| matches!(state, "R" | "S" | "D"))
    })
}

#[tokio::test]
async fn terminate_ends_a_process_that_double_forked_out_of_its_exec() {
    let dir = tempfile::tempdir().unwrap();
    let mock = mock(&dir).await;
    let mut rpc = raw(&mock).await;
    let (sandbox_id, task_id) = sandbox(&mock, &mut rpc).await;
    let sandbox_dir = mock.sandbox(&sandbox_id).unwrap().dir;
    // One escapes by its working directory only (no marker in its
    // environment), one by its environment only (it leaves the sandbox's
    // directory): both leave the exec's group and parentage.
    let script = format!(
        "(setsid env -i /bin/sh -c 'echo $$ > by-cwd.pid; exec sleep 1000' >/dev/null 2>&1 </dev/null &) ; \
         (setsid /bin/sh -c 'echo $$ > {0}/by-env.pid; cd /; exec sleep 1000' >/dev/null 2>&1 </dev/null &) ; \
         while [ ! -s by-cwd.pid ] || [ ! -s by-env.pid ]; do sleep 0.05; done",
        sandbox_dir.display()
    );
    let exec_id = rpc
        .container_exec(authed(
            &mock,
            wire::ContainerExecRequest {
                task_id: task_id.clone(),
                command: vec!["/bin/sh".into(), "-c".into(), script],
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .exec_id;
    let waited = rpc
        .container_exec_wait(authed(
            &mock,
            wire::ContainerExecWaitRequest {
                exec_id,
                timeout: 30.0,
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(waited.completed);
    let pid = |file: &str| -> u32 {
        std::fs::read_to_string(sandbox_dir.join(file))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let pids = [pid("by-cwd.pid"), pid("by-env.pid")];
    assert!(pids.iter().all(|p| running(*p)), "started: {pids:?}");

    rpc.sandbox_terminate(authed(&mock, wire::SandboxTerminateRequest { sandbox_id }))
        .await
        .unwrap();
    for pid in pids {
        // SIGKILL is delivered before terminate answers; the state follows.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while running(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!running(pid), "process {pid} outlived its sandbox");
    }
}
