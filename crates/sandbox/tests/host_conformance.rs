//! The conformance suite against the `host` backend.

use std::path::PathBuf;
use std::sync::Arc;

use sandbox::conformance::Harness;
use sandbox::host::{HostBackend, HostConfig};

fn harness() -> Harness {
    // Kept for the test process's lifetime: processes outlive the backend.
    let root: PathBuf = tempfile::tempdir().unwrap().keep();
    let config = HostConfig {
        root: root.join("host"),
        snapshot_dir: root.join("snapshots"),
        snapshot_store: None,
        shim_exe: PathBuf::from(env!("CARGO_BIN_EXE_garrison-shim")),
    };
    let reopen_config = config.clone();
    Harness {
        backend: Arc::new(HostBackend::new(config).unwrap()),
        reopen: Box::new(move || Arc::new(HostBackend::new(reopen_config.clone()).unwrap())),
        image: None,
        finds_snapshots_by_name: true,
    }
}

sandbox::conformance_tests!(harness());

/// A Garrison killed while it created (or destroyed) a sandbox leaves its
/// directory without a handle: the next create of that name clears it
/// instead of refusing the session on this host for good.
#[tokio::test]
async fn the_remains_of_an_interrupted_create_are_cleared_by_the_next_one() {
    use sandbox::{Sandbox, SandboxName, SandboxSpec};
    let root: PathBuf = tempfile::tempdir().unwrap().keep();
    let backend = HostBackend::new(HostConfig {
        root: root.join("host"),
        snapshot_dir: root.join("snapshots"),
        snapshot_store: None,
        shim_exe: PathBuf::from(env!("CARGO_BIN_EXE_garrison-shim")),
    })
    .unwrap();
    let name = SandboxName::for_session("devin-interrupted");
    let remains = root.join("host/sandboxes").join(name.as_str());
    std::fs::create_dir_all(remains.join("fs/workspace")).unwrap();
    std::fs::write(remains.join("fs/workspace/half-written"), "x").unwrap();
    assert!(backend.find(&name).await.unwrap().is_none());

    let spec = SandboxSpec {
        name: name.clone(),
        labels: sandbox::session_labels("devin-interrupted", "outpost_test"),
        image: None,
        restore_from: None,
        resources: Default::default(),
        network: Default::default(),
    };
    let handle = backend.create(&spec).await.unwrap();
    assert!(!remains.join("fs/workspace/half-written").exists());
    assert_eq!(
        backend.find(&name).await.unwrap().map(|h| h.name),
        Some(handle.name.clone())
    );
    // A recorded sandbox still refuses a second create.
    assert!(backend.create(&spec).await.is_err());
    backend.destroy(&handle).await.unwrap();
}
