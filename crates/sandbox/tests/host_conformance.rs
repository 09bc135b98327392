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
