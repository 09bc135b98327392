//! The `garrison` CLI on Modal: `image build NAME --backend modal` against
//! the mock Modal API, and `serve --backend modal` refusing to start
//! without a token.

use crate::common;

use std::os::unix::fs::PermissionsExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_build_on_modal_builds_the_recipe_and_caches_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mock = common::start_modal_mock(dir.path());
    let recipe = dir.path().join("recipe.toml");
    std::fs::write(
        &recipe,
        "packages = [\"python3\"]\nsteps = [\"echo ready\"]\nffmpeg = true\n",
    )
    .unwrap();
    let build = || {
        let mut command = tokio::process::Command::new(common::garrison_bin());
        command
            .args([
                "image",
                "build",
                "session",
                "--backend",
                "modal",
                "--recipe",
            ])
            .arg(&recipe)
            .arg("--state-dir")
            .arg(&state)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .envs(common::modal_env(&mock));
        command.output()
    };
    let out = build().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = mock.built_images();
    assert_eq!(built.len(), 1);
    let commands = &built[0].dockerfile_commands;
    assert!(
        commands[0].starts_with("FROM debian:bookworm-slim"),
        "{commands:?}"
    );
    assert!(
        commands
            .iter()
            .any(|c| c.contains("python3") && c.contains("ffmpeg")),
        "{commands:?}"
    );
    assert!(
        commands.iter().any(|c| c.contains("echo ready")),
        "{commands:?}"
    );
    assert!(stdout.contains(&built[0].id), "{stdout}");
    // The Modal token is never printed.
    assert!(!stdout.contains(mock.token_secret()));

    let cache = state.join("modal").join("images.json");
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        std::fs::read_to_string(&cache)
            .unwrap()
            .contains(&built[0].id)
    );

    // Unchanged recipe: the cached image is reused, nothing is rebuilt.
    let out = build().await.unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("reused"));
    assert_eq!(mock.calls("ImageGetOrCreate"), 1);
}

/// `serve --backend modal` without a Modal token stops at once and says
/// which setting is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_modal_without_a_token_names_the_setting() {
    let emu = common::emulator().await;
    let outpost = common::outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let args: Vec<String> = vec![
        "serve".into(),
        "--outpost".into(),
        outpost.clone(),
        "--api-url".into(),
        emu.base_url(),
        "--state-dir".into(),
        state.display().to_string(),
        "--backend".into(),
        "modal".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    let out = tokio::process::Command::new(common::garrison_bin())
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .env("GARRISON_CONFIG", dir.path().join("no-config"))
        .env("DEVIN_OUTPOSTS_TOKEN", emu.account_token())
        .env("MODAL_TOKEN_ID", "ak-only-half")
        .output();
    let out = tokio::time::timeout(common::HANG_GUARD, out)
        .await
        .expect("serve exits")
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("MODAL_TOKEN_SECRET"), "{text}");
}

/// `--recipe desktop` (no such file here) is the built-in desktop recipe,
/// on Modal as locally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_desktop_recipe_builds_on_modal() {
    let dir = tempfile::tempdir().unwrap();
    let mock = common::start_modal_mock(dir.path());
    let out = tokio::process::Command::new(common::garrison_bin())
        .args(["image", "build", "desktop", "--backend", "modal"])
        .args(["--recipe", "desktop", "--state-dir"])
        .arg(dir.path().join("state"))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .envs(common::modal_env(&mock))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let built = mock.built_images();
    assert_eq!(built.len(), 1);
    let commands = &built[0].dockerfile_commands;
    assert!(
        commands.iter().any(|c| c.contains("xvfb")
            && c.contains("matchbox-window-manager")
            && c.contains("chromium")),
        "{commands:?}"
    );
}
