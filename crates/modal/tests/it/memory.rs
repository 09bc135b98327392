//! Suspend and resume with memory against the mock: a memory snapshot ends
//! the sandbox and keeps its processes, even one that double-forked out of
//! its exec; a restore brings them back under the same handle, also for a
//! backend made anew (a Garrison restart); destroy ends and forgets a
//! sleeping session; a destroyed sandbox's processes are gone.

use crate::common;

use std::time::Duration;

use modal::ModalBackend;
use sandbox::{Handle, ProcessSpec, Resources, Sandbox, SandboxName, SandboxSpec};

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

/// Runs `script` in the handle's workspace and returns its output.
async fn sh(backend: &ModalBackend, handle: &Handle, name: &str, script: &str) -> String {
    let process = backend
        .spawn(
            handle,
            &ProcessSpec {
                name: name.into(),
                argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
                env: Default::default(),
                cwd: handle.workdir.clone(),
            },
        )
        .await
        .unwrap();
    let waited = tokio::time::timeout(
        Duration::from_secs(60),
        sandbox::wait_exit(backend, handle, &process, Duration::from_millis(50)),
    )
    .await
    .expect("the command ends")
    .unwrap();
    let output = backend
        .read_output(handle, &process, 0, 64 * 1024)
        .await
        .unwrap();
    let output = String::from_utf8_lossy(&output.data).into_owned();
    assert!(
        matches!(waited, sandbox::ProcessStatus::Exited(0)),
        "{waited:?}: {output}"
    );
    output
}

/// Starts a process that leaves its exec's process group and parentage,
/// and returns its pid.
async fn start_double_forked(backend: &ModalBackend, handle: &Handle) -> u32 {
    let out = sh(
        backend,
        handle,
        "bg",
        "setsid sh -c 'echo $$ > bg.pid; exec sleep 1000' >/dev/null 2>&1 </dev/null & \
         while [ ! -s bg.pid ]; do sleep 0.05; done; cat bg.pid",
    )
    .await;
    out.trim().parse().unwrap()
}

/// Whether `pid` is a running process: neither gone, nor a zombie, nor
/// stopped (as it is inside a memory snapshot).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| matches!(state, "R" | "S" | "D"))
    })
}

/// Waits (bounded) for `pid` to stop running: a kill is delivered before
/// the call returns, the process state follows.
async fn ends(pid: u32) -> bool {
    for _ in 0..600 {
        if !running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Waits (bounded) for `pid` to run: a SIGCONT is delivered before the
/// restore answers, the process state follows.
async fn runs(pid: u32) -> bool {
    for _ in 0..600 {
        if running(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_sandbox_resumes_with_its_processes_after_a_restart() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    assert!(backend.capabilities().suspend_keeps_memory);
    let spec = spec("session-memory");
    let handle = backend.create(&spec).await.unwrap();
    assert!(
        setup
            .mock
            .sandbox(&handle.id)
            .unwrap()
            .definition
            .enable_snapshot
    );
    let pid = start_double_forked(&backend, &handle).await;
    assert!(running(pid));

    backend.suspend(&handle).await.unwrap();
    assert_eq!(setup.mock.calls("TaskSnapshotMemory"), 1);
    assert!(!setup.mock.sandbox(&handle.id).unwrap().running);
    assert!(ends(pid).await, "stopped inside the snapshot");
    // Modal lists no running sandbox for it, the backend still does.
    let listed = backend.list().await.unwrap();
    let sleeping: Vec<_> = listed.iter().filter(|h| h.name == handle.name).collect();
    assert_eq!(sleeping, [&handle]);

    // A Garrison restart: a new backend on the same state.
    let backend = setup.backend();
    backend.resume(&handle).await.unwrap();
    assert_eq!(setup.mock.calls("SandboxRestoreV2"), 1);
    assert!(runs(pid).await, "the same process runs again");
    // The old handle now means the restored sandbox.
    let out = sh(
        &backend,
        &handle,
        "check",
        "cat bg.pid; grep -c sleep /proc/$(cat bg.pid)/cmdline",
    )
    .await;
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        [&pid.to_string(), "1"]
    );
    let restored: Vec<_> = setup
        .mock
        .sandboxes()
        .into_iter()
        .filter(|s| s.running)
        .collect();
    assert_eq!(restored.len(), 1);
    assert!(restored[0].restored_from.is_some());
    assert_eq!(restored[0].name.as_deref(), Some(spec.name.as_str()));
    // Listed as itself once running, with its labels.
    let listed = backend.list().await.unwrap();
    let mine: Vec<_> = listed.iter().filter(|h| h.name == handle.name).collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].id, restored[0].id);
    assert_eq!(mine[0].labels, handle.labels);
    assert_eq!(mine[0].workdir, handle.workdir);
    // A repeated resume (a crash after restoring) restores nothing more.
    backend.resume(&handle).await.unwrap();
    assert_eq!(setup.mock.calls("SandboxRestoreV2"), 1);

    backend.destroy(&handle).await.unwrap();
    assert!(
        ends(pid).await,
        "destroy ends the restored sandbox's process"
    );
    assert!(setup.mock.sandboxes().iter().all(|s| !s.running));
    assert!(
        !backend
            .list()
            .await
            .unwrap()
            .iter()
            .any(|h| h.name == handle.name)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_without_a_suspend_ends_a_double_forked_process() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let handle = backend.create(&spec("session-destroy")).await.unwrap();
    let pid = start_double_forked(&backend, &handle).await;
    assert!(running(pid));
    backend.destroy(&handle).await.unwrap();
    assert!(ends(pid).await, "process {pid} outlived its sandbox");
    assert_eq!(setup.mock.calls("TaskSnapshotMemory"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroying_a_sleeping_session_forgets_it_and_it_cannot_resume() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let handle = backend.create(&spec("session-forget")).await.unwrap();
    let pid = start_double_forked(&backend, &handle).await;
    backend.suspend(&handle).await.unwrap();
    backend.destroy(&handle).await.unwrap();
    assert!(
        !backend
            .list()
            .await
            .unwrap()
            .iter()
            .any(|h| h.name == handle.name)
    );
    let error = backend.resume(&handle).await.unwrap_err();
    assert!(error.is_gone(), "{error}");
    assert_eq!(setup.mock.calls("SandboxRestoreV2"), 0);
    // The mock keeps the stopped process in the snapshot until it shuts
    // down; it never runs again.
    assert!(ends(pid).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_memory_snapshot_fails_the_suspend_and_records_nothing() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let handle = backend.create(&spec("session-failed")).await.unwrap();
    setup
        .mock
        .fail_next("TaskSnapshotMemory", tonic::Code::FailedPrecondition, 1);
    assert!(backend.suspend(&handle).await.is_err());
    let listed = backend.list().await.unwrap();
    // Still running, listed once, as itself: the orchestrator destroys it.
    let mine: Vec<_> = listed.iter().filter(|h| h.name == handle.name).collect();
    assert_eq!(mine, [&handle]);
    assert!(backend.resume(&handle).await.unwrap_err().is_gone());
    backend.destroy(&handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_whose_answer_was_lost_is_found_by_its_name() {
    let setup = common::start(|_| {}).await;
    let backend = setup.backend();
    let handle = backend.create(&spec("session-lost")).await.unwrap();
    let pid = start_double_forked(&backend, &handle).await;
    backend.suspend(&handle).await.unwrap();
    // The restore happens, its answer is lost; the retry is refused (the
    // mock restores a snapshot once), so the sandbox is found by name.
    setup.mock.lose_next_answers("SandboxRestoreV2", 1);
    backend.resume(&handle).await.unwrap();
    assert_eq!(setup.mock.calls("SandboxRestoreV2"), 2);
    assert!(runs(pid).await);
    let out = sh(&backend, &handle, "check", "cat bg.pid").await;
    assert_eq!(out.trim(), pid.to_string());
    let listed = backend.list().await.unwrap();
    let mine: Vec<_> = listed.iter().filter(|h| h.name == handle.name).collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].labels, handle.labels);
    backend.destroy(&handle).await.unwrap();
    assert!(ends(pid).await);
}
