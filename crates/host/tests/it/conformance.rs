//! The conformance suite against the `host` backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use host::{HostBackend, HostConfig};
use sandbox::conformance::Harness;

/// A host backend's settings under `root`.
fn config_in(root: &Path) -> HostConfig {
    HostConfig {
        root: root.join("host"),
        snapshot_dir: root.join("snapshots"),
        snapshot_store: None,
        shim_exe: PathBuf::from(env!("CARGO_BIN_EXE_host-test-shim")),
    }
}

/// A sandbox of the host backend for `session`, as the orchestrator asks.
fn spec_for(session: &str) -> sandbox::SandboxSpec {
    sandbox::SandboxSpec {
        name: sandbox::SandboxName::for_session(session),
        labels: sandbox::session_labels(session, "outpost_test"),
        image: None,
        restore_from: None,
        resources: Default::default(),
        network: Default::default(),
    }
}

fn harness() -> Harness {
    // Kept for the test process's lifetime: processes outlive the backend.
    let root: PathBuf = tempfile::tempdir().unwrap().keep();
    let config = config_in(&root);
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
    use sandbox::Sandbox;
    let (backend, name, remains) = interrupted_create();
    assert!(backend.find(&name).await.unwrap().is_none());

    let spec = spec_for("devin-interrupted");
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

/// The same remains, when no create of that name follows (the session
/// ended elsewhere meanwhile): `remove_remains` clears them, once.
#[tokio::test]
async fn remove_remains_clears_an_interrupted_create() {
    use sandbox::Sandbox;
    let (backend, name, remains) = interrupted_create();

    assert!(backend.remove_remains(&name).await.unwrap());
    assert!(!remains.exists());
    assert!(!backend.remove_remains(&name).await.unwrap());
}

/// A backend in a new directory holding the remains of a create of
/// `devin-interrupted` killed part way: its directory, a half-written file,
/// no handle.
fn interrupted_create() -> (HostBackend, sandbox::SandboxName, PathBuf) {
    let root: PathBuf = tempfile::tempdir().unwrap().keep();
    let backend = HostBackend::new(config_in(&root)).unwrap();
    let name = sandbox::SandboxName::for_session("devin-interrupted");
    let remains = root.join("host/sandboxes").join(name.as_str());
    std::fs::create_dir_all(remains.join("fs/workspace")).unwrap();
    std::fs::write(remains.join("fs/workspace/half-written"), "x").unwrap();
    (backend, name, remains)
}

/// The host backend puts an executable into a sandbox as a hard link to
/// one stored copy: nothing is written per session.
#[tokio::test]
async fn executables_are_links_to_one_stored_copy() {
    use std::os::unix::fs::MetadataExt;

    use sandbox::Sandbox;
    use sha2::{Digest, Sha256};

    let root: PathBuf = tempfile::tempdir().unwrap().keep();
    let backend = HostBackend::new(config_in(&root)).unwrap();
    let create = async |session: &str| backend.create(&spec_for(session)).await.unwrap();
    let (a, b) = (create("devin-link-a").await, create("devin-link-b").await);
    let binary = b"#!/bin/sh\necho linked\n";
    let sha256 = hex::encode(Sha256::digest(binary));
    let path = |h: &sandbox::Handle| format!("{}/devin-remote", h.bin_dir);
    for handle in [&a, &b] {
        backend
            .put_executable(handle, &path(handle), binary, &sha256)
            .await
            .unwrap();
    }
    let stored = std::fs::metadata(root.join("host/executables").join(&sha256)).unwrap();
    let (in_a, in_b) = (
        std::fs::metadata(path(&a)).unwrap(),
        std::fs::metadata(path(&b)).unwrap(),
    );
    assert_eq!(in_a.ino(), stored.ino());
    assert_eq!(in_b.ino(), stored.ino());
    assert!(stored.nlink() >= 3, "nlink {}", stored.nlink());
    assert_eq!(in_a.mode() & 0o7777, 0o555);

    // The digest becomes a file name: only a digest is one.
    for bad in ["../x", "../../sandboxes/x", &sha256.to_ascii_uppercase()] {
        let put = backend.put_executable(&a, &path(&a), binary, bad).await;
        assert!(
            matches!(put, Err(sandbox::SandboxError::Fatal(_))),
            "{bad:?}: {put:?}"
        );
    }
    assert!(!root.join("host/x").exists());

    // A backend opened again on the same root trusts no copy it did not
    // write: the directory is emptied.
    let _reopened = HostBackend::new(config_in(&root)).unwrap();
    assert_eq!(
        std::fs::read_dir(root.join("host/executables"))
            .unwrap()
            .count(),
        0
    );
    // The sandboxes keep their links.
    assert_eq!(std::fs::read(path(&a)).unwrap(), binary);
    for handle in [&a, &b] {
        backend.destroy(handle).await.unwrap();
    }
}

/// A tmpfs of a few MiB for one test, unmounted on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(path: &Path) -> Option<SmallFs> {
        std::fs::create_dir_all(path).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs"])
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        mounted.then(|| SmallFs(path.to_owned()))
    }

    /// Fills it to the last byte.
    fn fill(&self) {
        use std::io::Write;
        let mut file = std::fs::File::create(self.0.join("filler")).unwrap();
        for chunk in [64 * 1024, 1] {
            while file.write_all(&vec![0u8; chunk]).is_ok() {}
        }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A create that fails part way (here on a full disk, as under a host's
/// state directory filled up) removes the directory it made: with no
/// handle in it, nothing would ever find it to remove it.
#[tokio::test]
async fn a_create_that_fails_on_a_full_disk_leaves_no_directory() {
    use sandbox::Sandbox;
    let root: PathBuf = tempfile::tempdir().unwrap().keep();
    let Some(small) = SmallFs::mount(&root.join("host")) else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let backend = HostBackend::new(config_in(&root)).unwrap();
    small.fill();
    assert!(backend.create(&spec_for("devin-full")).await.is_err());
    let left: Vec<_> = std::fs::read_dir(root.join("host/sandboxes"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
