//! The desktop against real containers on the `desktop` test image (the
//! built-in recipe): its X server answers on [`DESKTOP_DISPLAY`] once
//! create returns, with the window manager beside it, announced by
//! `machine`; killed, it is started again; an image without one is
//! refused. Like `tests/it/backend.rs` these need root, the
//! test images (`GARRISON_TEST_IMAGES`) and a static shim
//! (`GARRISON_STATIC_SHIM`); without them they say why and check nothing.

use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::images::DEFAULT_IMAGE;
use sandbox::DesktopState;

/// The image of the built-in `desktop` recipe, as scripts/test-images
/// names it.
const DESKTOP_IMAGE: &str = "desktop";

/// The config of a backend with the desktop on, running the test images
/// (`GARRISON_TEST_IMAGES`) and by default their `desktop` image.
fn desktop_config(dir: &Path) -> Option<LocalConfig> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the local backend needs root");
        return None;
    }
    let (Some(images), Some(shim)) = (
        std::env::var_os("GARRISON_TEST_IMAGES"),
        std::env::var_os("GARRISON_STATIC_SHIM"),
    ) else {
        eprintln!("skipped: GARRISON_TEST_IMAGES or GARRISON_STATIC_SHIM is not set");
        return None;
    };
    Some(LocalConfig {
        root: dir.join("local"),
        snapshot_dir: dir.join("snapshots"),
        snapshot_store: None,
        images: ImageStore::open(Path::new(&images)).unwrap(),
        default_image: DESKTOP_IMAGE.to_owned(),
        shim_exe: PathBuf::from(shim),
        tini: PathBuf::from("/usr/bin/tini-static"),
        runc: PathBuf::from("/usr/sbin/runc"),
        runsc: PathBuf::from("/usr/bin/runsc"),
        runtime: Default::default(),
        desktop: true,
        userns: true,
        devices: Vec::new(),
        cdi_spec_dirs: Vec::new(),
    })
}

/// [`desktop_config`], when the test images have the `desktop` image
/// (scripts/test-images builds it with `--recipe desktop`).
fn desktop_image_config(dir: &Path) -> Option<LocalConfig> {
    let config = desktop_config(dir)?;
    if config.images.resolve(DESKTOP_IMAGE).is_err() {
        eprintln!("skipped: no {DESKTOP_IMAGE:?} test image (scripts/test-images builds it)");
        return None;
    }
    Some(config)
}

fn spec(image: Option<&str>) -> SandboxSpec {
    let session = format!("desktop-{:016x}", rand::random::<u64>());
    SandboxSpec {
        name: SandboxName::for_session(&session),
        labels: sandbox::session_labels(&session, "outpost_test"),
        image: image.map(str::to_owned),
        restore_from: None,
        resources: sandbox::Resources {
            cpus: 1.0,
            memory_mb: 512,
            disk_mb: 256,
        },
        network: Default::default(),
    }
}

/// Runs `script` with `sh -c` in the sandbox to its end: its exit code
/// and output.
async fn sh(backend: &LocalBackend, handle: &Handle, script: &str) -> (ProcessStatus, String) {
    let spec = ProcessSpec {
        name: format!("sh-{:08x}", rand::random::<u32>()),
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
        cwd: "/".into(),
    };
    let p = backend.spawn(handle, &spec).await.unwrap();
    let status = sandbox::wait_exit(backend, handle, &p, Duration::from_millis(25))
        .await
        .unwrap();
    let out = backend.read_output(handle, &p, 0, 64 << 10).await.unwrap();
    (status, String::from_utf8_lossy(&out.data).into_owned())
}

/// Calls `keep_desktop` until it reports what `wanted` accepts (no time
/// limit of its own: the test runner's applies), returning every state
/// seen before.
async fn keep_until(
    backend: &LocalBackend,
    handle: &Handle,
    wanted: impl Fn(&DesktopState) -> bool,
) -> (DesktopState, Vec<DesktopState>) {
    let mut seen = Vec::new();
    loop {
        let state = backend.keep_desktop(handle).await.unwrap();
        if wanted(&state) {
            return (state, seen);
        }
        seen.push(state);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_sandbox_has_an_x_server_that_answers_and_a_window_manager() {
    let dir = tempfile::tempdir().unwrap();
    let Some(config) = desktop_image_config(dir.path()) else {
        return;
    };
    let backend = LocalBackend::new(config).unwrap();
    let handle = backend.create(&spec(None)).await.unwrap();

    // No wait: create returns once the X server answers.
    let state = backend.keep_desktop(&handle).await.unwrap();
    let machine = backend.machine(&handle).await.unwrap();
    let (info, dpyinfo) = sh(&backend, &handle, "xdpyinfo -display :99").await;
    let wm = sh(
        &backend,
        &handle,
        // (-f: the name is longer than the 15 characters -x compares.)
        "i=0; until pgrep -f '^[^ ]*matchbox-window-manager' >/dev/null; do \
         i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.1; done; echo up",
    )
    .await;
    backend.destroy(&handle).await.unwrap();

    assert_eq!(state, DesktopState::Answering);
    assert_eq!(machine.display.as_deref(), Some(DESKTOP_DISPLAY));
    assert_eq!(machine.user, "root");
    assert_eq!(info, ProcessStatus::Exited(0), "{dpyinfo}");
    assert!(dpyinfo.contains("1920x1080 pixels"), "{dpyinfo}");
    assert_eq!(wm, (ProcessStatus::Exited(0), "up\n".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_x_server_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let Some(config) = desktop_image_config(dir.path()) else {
        return;
    };
    let backend = LocalBackend::new(config).unwrap();
    let handle = backend.create(&spec(None)).await.unwrap();

    let before = backend.keep_desktop(&handle).await.unwrap();
    let killed = sh(&backend, &handle, "pkill -KILL -x Xvfb && echo killed").await;
    // Until the kill lands the old server may still answer a probe.
    let (restarted, _) = keep_until(&backend, &handle, |s| {
        matches!(s, DesktopState::Restarted { .. })
    })
    .await;
    let (answering, between) =
        keep_until(&backend, &handle, |s| *s == DesktopState::Answering).await;
    let (info, dpyinfo) = sh(&backend, &handle, "xdpyinfo -display :99").await;
    backend.destroy(&handle).await.unwrap();

    assert_eq!(before, DesktopState::Answering);
    assert_eq!(killed.1, "killed\n", "{killed:?}");
    assert_eq!(
        restarted,
        DesktopState::Restarted {
            reason: "the X server was not running".to_owned()
        }
    );
    assert_eq!(answering, DesktopState::Answering);
    assert!(
        between.iter().all(|s| *s == DesktopState::Starting),
        "{between:?}"
    );
    assert_eq!(info, ProcessStatus::Exited(0), "{dpyinfo}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_desktop_on_an_image_without_xvfb_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut config) = desktop_config(dir.path()) else {
        return;
    };
    config.default_image = DEFAULT_IMAGE.to_owned();
    let backend = LocalBackend::new(config).unwrap();

    let err = backend.create(&spec(None)).await.unwrap_err().to_string();

    assert!(
        err.contains("image \"default\" has no X server")
            && err.contains("garrison image build default --recipe desktop"),
        "{err}"
    );
    assert!(backend.list().await.unwrap().is_empty(), "nothing is left");
}
