//! The host backend's handle records carry a format: one written before
//! formats still reads, one a newer Garrison wrote is refused untouched.

use std::path::PathBuf;

use host::{HostBackend, HostConfig};
use sandbox::{Sandbox, SandboxName};

#[tokio::test]
async fn handles_without_a_format_read_and_newer_ones_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let backend = HostBackend::new(HostConfig {
        root: root.path().join("host"),
        snapshot_dir: root.path().join("snapshots"),
        snapshot_store: None,
        shim_exe: PathBuf::from(env!("CARGO_BIN_EXE_host-test-shim")),
    })
    .unwrap();
    let name = SandboxName::for_session("devin-formats");
    let dir = root.path().join("host/sandboxes").join(name.as_str());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("handle.json");
    // As releases before formats wrote it.
    let todays = format!(
        r#"{{"backend":"host","id":"{name}","name":"{name}","labels":{{}},"workdir":"/w","state_dir":"/s","bin_dir":"/b","home":"/h"}}"#
    );
    std::fs::write(&path, &todays).unwrap();
    assert_eq!(
        backend.find(&name).await.unwrap().map(|h| h.name),
        Some(name.to_string())
    );
    assert_eq!(backend.list().await.unwrap().len(), 1);

    let newer = todays.replacen('{', r#"{"format":999,"#, 1);
    std::fs::write(&path, &newer).unwrap();
    for err in [
        backend.find(&name).await.unwrap_err(),
        backend.list().await.unwrap_err(),
    ] {
        let message = format!("{err:#}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), newer);
}
