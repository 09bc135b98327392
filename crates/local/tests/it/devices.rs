//! CDI devices in real sandboxes under runc: a spec written by the test
//! hands a harmless device (/dev/fuse, else /dev/loop-control), a mounted
//! host directory and a variable to the sandbox, with and without a user
//! namespace; a sandbox without it cannot open the device; a malformed spec
//! and an unknown device fail the create, saying why, and so does any
//! device under runsc.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use local::{LocalBackend, LocalConfig};
use sandbox::{Sandbox, SandboxError};

use crate::support::{Sized, config, sandbox_in, sh, sized, spec};

const DEVICE: &str = "garrison.test/dev=harmless";

/// The device used: /dev/fuse (char 10:229), else /dev/loop-control
/// (10:237).
fn device() -> Option<(&'static str, u32)> {
    [("/dev/fuse", 229), ("/dev/loop-control", 237)]
        .into_iter()
        .find(|(path, _)| Path::new(path).exists())
}

/// A spec directory with [`DEVICE`]: the node (type and numbers given, its
/// mode read from the host), a read-only mount of a host directory holding
/// `known.txt`, a variable and a hook writing `hook-state.json` there. Everything in it readable by the
/// container's root, whose host uid is unprivileged under a user namespace.
fn spec_dir(node: &str, minor: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("known.txt"), "from the host\n").unwrap();
    for (path, mode) in [(dir.path(), 0o755), (&shared, 0o755)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(
        shared.join("known.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let spec = serde_json::json!({
        "cdiVersion": "0.6.0",
        "kind": "garrison.test/dev",
        // A hook that keeps the state runc hands it, to show it ran.
        "containerEdits": {
            "env": ["CDI_TEST_VAR=from-the-spec"],
            "hooks": [{"hookName": "createRuntime", "path": "/bin/sh",
                       "args": ["sh", "-c", format!("cat > {}/hook-state.json", dir.path().display())]}]
        },
        "devices": [{
            "name": "harmless",
            "containerEdits": {
                "deviceNodes": [{"path": node, "type": "c", "major": 10, "minor": minor}],
                "mounts": [{"hostPath": shared, "containerPath": "/mnt/cdi-shared",
                            "options": ["ro", "bind"]}]
            }
        }]
    });
    std::fs::write(dir.path().join("test.json"), spec.to_string()).unwrap();
    dir
}

fn with_devices(config: LocalConfig, specs: &Path, devices: &[&str]) -> LocalConfig {
    LocalConfig {
        devices: devices.iter().map(|d| (*d).to_owned()).collect(),
        cdi_spec_dirs: vec![specs.to_owned()],
        ..config
    }
}

/// What a script reports about the device, the mount and the variable.
/// (`<>` would make a plain file where there is no node: only a character
/// device counts.)
const PROBE: &str = "if [ -c \"$1\" ] && (exec 3<>\"$1\") 2>/dev/null; then echo opened; \
     else echo refused; fi; \
     cat /mnt/cdi-shared/known.txt 2>/dev/null || echo no-file; \
     echo \"var=${CDI_TEST_VAR:-unset}\"";

async fn probe(s: &Sized, node: &str) -> String {
    let script = format!("set -- {node}; {PROBE}");
    let (status, out) = sh(s, &script).await;
    assert!(matches!(status, sandbox::ProcessStatus::Exited(0)), "{out}");
    out
}

async fn the_device_its_mount_and_its_variable_reach_the_sandbox(userns: bool) {
    let (Some(config), Some((node, minor))) = (config(), device()) else {
        return;
    };
    let specs = spec_dir(node, minor);
    let config = LocalConfig {
        userns,
        ..with_devices(config, specs.path(), &[DEVICE])
    };
    let backend = std::sync::Arc::new(LocalBackend::new(config).unwrap());
    let s = sandbox_in(&backend, "local-cdi", sized(1.0, 256, 256), None).await;
    let out = probe(&s, node).await;
    assert_eq!(out, "opened\nfrom the host\nvar=from-the-spec\n");
    let state = std::fs::read_to_string(specs.path().join("hook-state.json")).unwrap();
    assert!(state.contains(&s.handle.name), "{state}");
    // Read-only, as the spec says.
    let (_, out) = sh(
        &s,
        "touch /mnt/cdi-shared/x 2>/dev/null && echo wrote || echo ro",
    )
    .await;
    assert_eq!(out, "ro\n");
    backend.destroy(&s.handle).await.unwrap();
    // The tmpfs of its own device nodes (user namespaces) went with it.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&s.handle.name), "{mounts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_reaches_a_sandbox_in_a_user_namespace() {
    the_device_its_mount_and_its_variable_reach_the_sandbox(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_reaches_a_sandbox_without_a_user_namespace() {
    the_device_its_mount_and_its_variable_reach_the_sandbox(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_without_the_device_cannot_open_it() {
    let (Some(config), Some((node, minor))) = (config(), device()) else {
        return;
    };
    let backend = std::sync::Arc::new(LocalBackend::new(config).unwrap());
    let s = sandbox_in(&backend, "local-cdi-none", sized(1.0, 256, 256), None).await;
    let out = probe(&s, node).await;
    assert_eq!(out, "refused\nno-file\nvar=unset\n");
    // Nor make a node of its own for it.
    let script = format!(
        "mknod /tmp/node c 10 {minor} 2>/dev/null && (exec 3<>/tmp/node) 2>/dev/null \
         && echo opened || echo refused"
    );
    assert_eq!(sh(&s, &script).await.1, "refused\n");
    backend.destroy(&s.handle).await.unwrap();
}

/// The create's error, which must be fatal (a retry cannot fix a spec).
async fn create_error(config: LocalConfig) -> String {
    let backend = LocalBackend::new(config).unwrap();
    match backend
        .create(&spec("local-cdi-bad", sized(1.0, 256, 256), None))
        .await
    {
        Err(SandboxError::Fatal(e)) => format!("{e:#}"),
        Err(other) => panic!("not fatal: {other}"),
        Ok(_) => panic!("created"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_spec_fails_the_create_naming_the_file() {
    let Some(config) = config() else {
        return;
    };
    let specs = tempfile::tempdir().unwrap();
    let broken = specs.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "cdiVersion: 0.6.0\nkind: garrison.test/dev\ndevices: {\n",
    )
    .unwrap();
    let error = create_error(with_devices(config, specs.path(), &[DEVICE])).await;
    assert!(
        error.contains(&format!("unknown CDI device {DEVICE}")),
        "{error}"
    );
    assert!(
        error.contains(&format!("the spec {} could not be read", broken.display())),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_device_fails_the_create_listing_the_known_ones() {
    let (Some(config), Some((node, minor))) = (config(), device()) else {
        return;
    };
    let specs = spec_dir(node, minor);
    let error = create_error(with_devices(
        config,
        specs.path(),
        &["garrison.test/dev=missing"],
    ))
    .await;
    assert!(
        error.contains("unknown CDI device garrison.test/dev=missing; known devices: garrison.test/dev=harmless"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_are_refused_under_runsc() {
    let (Some(config), Some((node, minor))) = (
        crate::support::config_for(crate::support::Runtime::Runsc),
        device(),
    ) else {
        return;
    };
    let specs = spec_dir(node, minor);
    let error = create_error(with_devices(config, specs.path(), &[DEVICE])).await;
    assert!(
        error.contains("devices need runtime runc") && error.contains("--nvproxy"),
        "{error}"
    );
}
