//! A recipe's `chromium = true` end to end on the local backend: a session
//! served on the `desktop` test image (the built-in `desktop` recipe, which
//! has `chromium = true`; scripts/test-images builds it) gets
//! `DEVIN_CHROME_PATH` naming the image's browser, and that browser runs
//! inside the sandbox.

use std::os::unix::fs::PermissionsExt;

use crate::common::*;
use emulator::Then;
use fleet::SessionStatus;
use local::images::ImageStore;

/// The image scripts/test-images builds with `--recipe desktop`: one
/// Chromium image serves this test and desktop_e2e.
const IMAGE: &str = "desktop";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_on_the_chromium_image_gets_a_browser_that_runs() {
    let Some(images) = desktop_test_images(IMAGE) else {
        return;
    };
    // What the image recorded at build time: its browser, a real
    // executable in its root filesystem.
    let image = ImageStore::open(&images)
        .and_then(|store| store.resolve(IMAGE))
        .expect("the desktop image resolves");
    let chrome = image
        .chrome_path
        .clone()
        .expect("the desktop image records a browser");
    let in_rootfs = image.rootfs.join(chrome.trim_start_matches('/'));
    let mode = std::fs::metadata(&in_rootfs)
        .unwrap_or_else(|err| panic!("{}: {err}", in_rootfs.display()))
        .permissions()
        .mode();
    assert!(
        mode & 0o111 != 0,
        "{} is not executable",
        in_rootfs.display()
    );

    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec!["--image".into(), IMAGE.into()],
        },
        Backend::Local,
    );

    let id = session(
        &emu,
        &outpost,
        vec![
            run("env"),
            run("\"${DEVIN_CHROME_PATH:?not set}\" --version 2>&1"),
        ],
        Then::End,
    );
    wait_until("terminated and released", Some(&g), || {
        status_is(&emu, &id, SessionStatus::Terminated) && released(&emu, &id)
    })
    .await;

    let v = view(&emu, &id);
    assert_eq!(v.connections, 1, "exactly one remote connected");
    let outputs = step_outputs(&emu, &id);
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    let env: std::collections::BTreeMap<&str, &str> = outputs[0]
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    assert_eq!(
        env.get("DEVIN_CHROME_PATH").copied(),
        Some(chrome.as_str()),
        "the remote's environment: {env:?}"
    );
    // Debian's build prints e.g. "Chromium 120.0.6099.224 built on Debian 12".
    let version = outputs[1].trim();
    assert!(
        version.lines().any(|line| line.starts_with("Chromium ")),
        "`$DEVIN_CHROME_PATH --version` in the sandbox printed: {version:?}"
    );
}
