//! What the tests of the `local` backend share: its configuration from the
//! test environment, and sandboxes to run shell scripts in.
//!
//! These need root and the default image that `scripts/setup` builds into
//! `$GARRISON_TEST_IMAGES` (scripts/test exports it). Without them each
//! helper says why and returns `None`, and the test passes without checking
//! anything, so a developer without root can still run the rest of the
//! suite; CI has both.
#![allow(dead_code)] // each test file uses its own part

use std::path::PathBuf;
use std::time::Duration;

pub(crate) use local::Runtime;
use local::images::ImageStore;
use local::{LocalBackend, LocalConfig};
use sandbox::{ProcessSpec, ProcessStatus, Resources, Sandbox, SandboxName, SandboxSpec};

pub(crate) fn environment() -> Option<(PathBuf, PathBuf)> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the local backend needs root");
        return None;
    }
    let Some(images) = std::env::var_os("GARRISON_TEST_IMAGES").map(PathBuf::from) else {
        eprintln!(
            "skipped: GARRISON_TEST_IMAGES is not set (run scripts/test, which builds the test image)"
        );
        return None;
    };
    let shim = std::env::var_os("GARRISON_STATIC_SHIM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_local-test-shim")));
    Some((images, shim))
}

/// A configuration for runc sandboxes.
pub(crate) fn config() -> Option<LocalConfig> {
    config_for(Runtime::Runc)
}

/// A configuration for sandboxes on `runtime`. A missing runsc is not a
/// reason to skip, like a missing runc: `LocalBackend::new` refuses it,
/// naming scripts/setup.
pub(crate) fn config_for(runtime: Runtime) -> Option<LocalConfig> {
    let (images, shim) = environment()?;
    let root: PathBuf = tempfile::tempdir().unwrap().keep();
    Some(LocalConfig {
        root: root.join("local"),
        snapshot_dir: root.join("snapshots"),
        snapshot_store: None,
        images: ImageStore::open(&images).unwrap(),
        default_image: local::images::DEFAULT_IMAGE.to_owned(),
        shim_exe: shim,
        tini: PathBuf::from("/usr/bin/tini-static"),
        runc: Runtime::Runc.default_binary(),
        runsc: Runtime::Runsc.default_binary(),
        runtime,
        desktop: false,
        userns: true,
        devices: Vec::new(),
        cdi_spec_dirs: Vec::new(),
    })
}

pub(crate) struct Sized {
    pub backend: std::sync::Arc<LocalBackend>,
    pub handle: sandbox::Handle,
}

/// Resources of a test sandbox.
pub(crate) fn sized(cpus: f64, memory_mb: u64, disk_mb: u64) -> Resources {
    Resources {
        cpus,
        memory_mb,
        disk_mb,
    }
}

/// A sandbox for a fresh session called `<label>-<random>`.
pub(crate) fn spec(
    label: &str,
    resources: Resources,
    restore_from: Option<sandbox::SnapshotRef>,
) -> SandboxSpec {
    let session = format!("{label}-{:016x}", rand::random::<u64>());
    SandboxSpec {
        name: SandboxName::for_session(&session),
        labels: sandbox::session_labels(&session, "outpost_test"),
        image: None,
        restore_from,
        resources,
        network: Default::default(),
    }
}

pub(crate) async fn sandbox_with(resources: Resources) -> Option<Sized> {
    sandbox_on(Runtime::Runc, resources).await
}

/// A sandbox on `runtime`.
pub(crate) async fn sandbox_on(runtime: Runtime, resources: Resources) -> Option<Sized> {
    let backend = std::sync::Arc::new(LocalBackend::new(config_for(runtime)?).unwrap());
    Some(sandbox_in(&backend, "local-limits", resources, None).await)
}

/// A sandbox made by `backend` for a fresh session (see [`spec`]),
/// restored from `restore_from` when given.
pub(crate) async fn sandbox_in(
    backend: &std::sync::Arc<LocalBackend>,
    label: &str,
    resources: Resources,
    restore_from: Option<sandbox::SnapshotRef>,
) -> Sized {
    let handle = backend
        .create(&spec(label, resources, restore_from))
        .await
        .unwrap();
    Sized {
        backend: backend.clone(),
        handle,
    }
}

/// The capabilities in the `CapEff:` line of a `/proc/<pid>/status` text
/// that would reach past a sandbox: rewriting or bypassing its network
/// rules (NET_ADMIN, NET_RAW) and mounting (SYS_ADMIN). 0 when none.
pub(crate) fn dangerous_capabilities(status: &str) -> u64 {
    const NET_ADMIN: u64 = 1 << 12;
    const NET_RAW: u64 = 1 << 13;
    const SYS_ADMIN: u64 = 1 << 21;
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
        .expect("a CapEff line");
    effective & (NET_ADMIN | NET_RAW | SYS_ADMIN)
}

pub(crate) async fn sh(s: &Sized, script: &str) -> (ProcessStatus, String) {
    let spec = ProcessSpec {
        name: format!("sh-{:08x}", rand::random::<u32>()),
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: [("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())].into(),
        cwd: s.handle.workdir.clone(),
    };
    let p = s.backend.spawn(&s.handle, &spec).await.unwrap();
    let status = tokio::time::timeout(
        Duration::from_secs(120),
        sandbox::wait_exit(s.backend.as_ref(), &s.handle, &p, Duration::from_millis(25)),
    )
    .await
    .expect("process finished")
    .unwrap();
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = s
            .backend
            .read_output(&s.handle, &p, offset, 1 << 20)
            .await
            .unwrap();
        if chunk.data.is_empty() {
            break;
        }
        offset = chunk.next_offset;
        out.extend(chunk.data);
    }
    (status, String::from_utf8_lossy(&out).into_owned())
}

/// For each `name`, a module `name` with the tests `runc` and `runsc`, each
/// calling `async fn name(runtime: Runtime)` of the file: one test body, run
/// under both runtimes.
#[allow(unused_macros)]
macro_rules! under_both_runtimes {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn runc() {
                    super::$name(super::Runtime::Runc).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn runsc() {
                    super::$name(super::Runtime::Runsc).await
                }
            }
        )*
    };
}

/// The host pids in sandbox `name`'s cgroup (cgroup v1 or v2).
pub(crate) fn sandbox_pids(name: &str) -> Vec<u32> {
    ["/sys/fs/cgroup/pids/garrison", "/sys/fs/cgroup/garrison"]
        .iter()
        .find_map(|base| std::fs::read_to_string(format!("{base}/{name}/cgroup.procs")).ok())
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}
