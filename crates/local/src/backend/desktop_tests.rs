//! The desktop against real containers: an image with an Xvfb (a stand-in
//! script that records its arguments, so no X server is needed) gets one
//! started on [`DESKTOP_DISPLAY`], announced by `machine`; an image without
//! one is refused. Like `tests/it/backend.rs` these need root, the
//! default test image (`GARRISON_TEST_IMAGES`) and a static shim
//! (`GARRISON_STATIC_SHIM`); without them they say why and check nothing.

use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::images::{DEFAULT_IMAGE, Image};

/// A store in `dir` holding `desktop`: the default test image with a fake
/// `/usr/bin/Xvfb`, and the config of a backend with the desktop on.
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
    let default = ImageStore::open(Path::new(&images))
        .unwrap()
        .resolve(DEFAULT_IMAGE)
        .unwrap();
    let store = ImageStore::open(&dir.join("images")).unwrap();
    let work = store.temp_dir().unwrap();
    let rootfs = work.path().join("rootfs");
    let copied = std::process::Command::new("cp")
        .args(["-a", "--"])
        .arg(&default.rootfs)
        .arg(&rootfs)
        .status()
        .unwrap();
    assert!(copied.success());
    let xvfb = rootfs.join("usr/bin/Xvfb");
    std::fs::write(
        &xvfb,
        "#!/bin/sh\necho \"$@\" > /tmp/xvfb-args.tmp\nmv /tmp/xvfb-args.tmp /tmp/xvfb-args\nexec sleep 100000\n",
    )
    .unwrap();
    std::fs::set_permissions(&xvfb, std::fs::Permissions::from_mode(0o755)).unwrap();
    store
        .install(
            work,
            Image {
                id: format!("sha256-{:064x}", rand::random::<u128>()),
                name: "desktop".to_owned(),
                rootfs: PathBuf::new(),
                created_at_ms: 0,
                size_bytes: 0,
                chrome_path: None,
                xvfb_path: Some("/usr/bin/Xvfb".to_owned()),
                source: "test".to_owned(),
            },
        )
        .unwrap();
    Some(LocalConfig {
        root: dir.join("local"),
        snapshot_dir: dir.join("snapshots"),
        snapshot_store: None,
        images: store,
        default_image: "desktop".to_owned(),
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

/// `cat`s `path` in the sandbox until it exists (no time limit of its own:
/// the test runner's applies).
async fn read_when_there(backend: &LocalBackend, handle: &Handle, path: &str) -> String {
    loop {
        let spec = ProcessSpec {
            name: format!("cat-{:08x}", rand::random::<u32>()),
            argv: vec!["cat".into(), path.into()],
            env: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
            cwd: "/".into(),
        };
        let p = backend.spawn(handle, &spec).await.unwrap();
        let status = sandbox::wait_exit(backend, handle, &p, Duration::from_millis(25))
            .await
            .unwrap();
        if status == ProcessStatus::Exited(0) {
            let out = backend.read_output(handle, &p, 0, 4096).await.unwrap();
            return String::from_utf8_lossy(&out.data).into_owned();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desktop_sandbox_runs_xvfb_and_announces_its_display() {
    let dir = tempfile::tempdir().unwrap();
    let Some(config) = desktop_config(dir.path()) else {
        return;
    };
    let backend = LocalBackend::new(config).unwrap();
    let handle = backend.create(&spec(None)).await.unwrap();

    let machine = backend.machine(&handle).await.unwrap();
    // Destroyed before any assertion, so a failure leaves no container.
    let args = match machine.display {
        Some(_) => read_when_there(&backend, &handle, "/tmp/xvfb-args").await,
        None => String::new(),
    };
    backend.destroy(&handle).await.unwrap();

    assert_eq!(machine.display.as_deref(), Some(DESKTOP_DISPLAY));
    assert_eq!(machine.user, "root");
    assert_eq!(args.trim(), ":99 -screen 0 1920x1080x24 -nolisten tcp");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_desktop_on_an_image_without_xvfb_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut config) = desktop_config(dir.path()) else {
        return;
    };
    config.images = ImageStore::open(Path::new(
        &std::env::var_os("GARRISON_TEST_IMAGES").unwrap(),
    ))
    .unwrap();
    config.default_image = DEFAULT_IMAGE.to_owned();
    let backend = LocalBackend::new(config).unwrap();

    let err = backend.create(&spec(None)).await.unwrap_err().to_string();

    assert!(
        err.contains("Xvfb") && err.contains("desktop = true"),
        "{err}"
    );
    assert!(backend.list().await.unwrap().is_empty(), "nothing is left");
}
