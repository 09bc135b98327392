//! `garrison image build|ls|rm --backend tensorlake`: the real binary
//! against the in-process mock Tensorlake.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use crate::common;
use crate::common::{TENSORLAKE_KEY, TensorlakeWorld, garrison_bin};

struct Host {
    world: std::sync::Arc<TensorlakeWorld>,
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let world = TensorlakeWorld::for_state_dir(&dir.path().join("state"));
        // The mock runs the steps on this machine: its `apt-get` only says
        // what it was asked.
        let bin = dir.path().join("fake-bin");
        std::fs::create_dir_all(&bin).unwrap();
        let apt = bin.join("apt-get");
        std::fs::write(&apt, "#!/bin/sh\necho \"fake apt-get $*\"\n").unwrap();
        std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { world, dir }
    }

    fn recipe(&self, text: &str) -> std::path::PathBuf {
        let path = self.dir.path().join("recipe.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    async fn garrison(&self, args: &[&str], recipe: Option<&Path>) -> Output {
        let mut command = tokio::process::Command::new(garrison_bin());
        command
            .arg("image")
            .args(args)
            .arg("--state-dir")
            .arg(self.dir.path().join("state"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env(
                "TENSORLAKE_BUILD_PATH",
                format!(
                    "{}:/usr/bin:/bin",
                    self.dir.path().join("fake-bin").display()
                ),
            )
            .envs(self.world.env())
            .kill_on_drop(true);
        if let Some(recipe) = recipe {
            command.arg("--recipe").arg(recipe);
        }
        let output = tokio::time::timeout(common::HANG_GUARD, command.output())
            .await
            .expect("garrison image finishes")
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!all.contains(TENSORLAKE_KEY), "the API key was printed");
        output
    }

    fn sandboxes_left(&self) -> Vec<std::path::PathBuf> {
        self.world.sandbox_dirs()
    }
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_ls_and_rm_go_through_tensorlakes_catalog() {
    let host = Host::new();
    let recipe = host.recipe(
        "packages = [\"jq\"]\nffmpeg = true\nsteps = [\"echo built > marker\", \"echo second step\"]\n",
    );
    let out = host
        .garrison(
            &["build", "garrison-session", "--backend", "tensorlake"],
            Some(&recipe),
        )
        .await;
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    for expected in [
        "step 1/3: packages",
        "fake apt-get install -y --no-install-recommends ca-certificates ffmpeg git jq",
        "step 3/3: steps[1]",
        "| second step",
        "built garrison-session on Tensorlake: image_",
        "TENSORLAKE_IMAGE=garrison-session",
    ] {
        assert!(printed.contains(expected), "{expected:?} in:\n{printed}");
    }

    let out = host
        .garrison(&["ls", "--backend", "tensorlake"], None)
        .await;
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    assert!(listed.starts_with("NAME"), "{listed}");
    assert!(listed.contains("garrison-session  image_"), "{listed}");
    let out = host
        .garrison(&["ls", "--backend", "tensorlake", "--json"], None)
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let images: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let built = images
        .iter()
        .find(|i| i["name"] == "garrison-session")
        .unwrap_or_else(|| panic!("not listed: {images:?}"));
    assert!(
        built["id"].as_str().unwrap().starts_with("image_"),
        "{built}"
    );

    let out = host
        .garrison(&["rm", "garrison-session", "--backend", "tensorlake"], None)
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let out = host
        .garrison(&["ls", "--backend", "tensorlake"], None)
        .await;
    assert!(!String::from_utf8_lossy(&out.stdout).contains("garrison-session"));
    let out = host
        .garrison(&["rm", "garrison-session", "--backend", "tensorlake"], None)
        .await;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("no image garrison-session"),
        "{}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_fails_the_build_naming_it_and_leaves_no_sandbox() {
    let host = Host::new();
    let recipe = host.recipe("steps = [\"echo compiling; echo 'cc: fatal error' >&2; exit 4\"]\n");
    let out = host
        .garrison(
            &["build", "broken", "--backend", "tensorlake"],
            Some(&recipe),
        )
        .await;
    let printed = text(&out);
    assert!(!out.status.success(), "{printed}");
    assert!(
        printed.contains("build step steps[0] exited with status 4"),
        "{printed}"
    );
    assert!(printed.contains("| cc: fatal error"), "{printed}");
    // The mock removes a deleted sandbox's directory in the background.
    let deadline = std::time::Instant::now() + common::HANG_GUARD;
    while !host.sandboxes_left().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(host.sandboxes_left().is_empty(), "the builder is deleted");
    let out = host
        .garrison(&["ls", "--backend", "tensorlake"], None)
        .await;
    assert!(!String::from_utf8_lossy(&out.stdout).contains("broken"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_catalog_cannot_hold_is_refused_up_front() {
    let host = Host::new();
    let out = host
        .garrison(&["build", "Session", "--backend", "tensorlake"], None)
        .await;
    assert!(!out.status.success());
    assert!(text(&out).contains("lowercase"), "{}", text(&out));
    assert!(host.sandboxes_left().is_empty());
    let out = host
        .garrison(
            &["build", "x", "--backend", "tensorlake", "--base", " "],
            None,
        )
        .await;
    assert!(!out.status.success());
    assert!(text(&out).contains("--base is empty"), "{}", text(&out));
    let out = host.garrison(&["build", "x", "--base", "y"], None).await;
    assert!(!out.status.success());
    assert!(text(&out).contains("--base is for --backend tensorlake"));
}

/// `deploy tensorlake --image NAME` boots the orchestrator's sandbox from
/// an image built here (its tools), and still copies this binary in: the
/// deployed serve is always the build that resolved its settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_boots_from_a_catalog_image_and_still_copies_the_binary_in() {
    let host = Host::new();
    let recipe = host.recipe("steps = [\"echo from-the-image > tool.txt\"]\n");
    let out = host
        .garrison(
            &["build", "orchestrator-base", "--backend", "tensorlake"],
            Some(&recipe),
        )
        .await;
    assert!(out.status.success(), "{}", text(&out));

    let emu = common::emulator().await;
    let outpost = common::outpost(&emu);
    let output = tokio::time::timeout(
        common::HANG_GUARD,
        tokio::process::Command::new(garrison_bin())
            .args(["deploy", "tensorlake", "--image", "orchestrator-base", "--"])
            .args(["--outpost", &outpost, "--api-url", &emu.base_url()])
            .args(["--static-base-url", &emu.static_base_url()])
            .args(["--listen", "127.0.0.1:0"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", host.dir.path())
            .env("GARRISON_CONFIG", host.dir.path().join("no-config"))
            .env("DEVIN_OUTPOSTS_TOKEN", emu.account_token())
            .envs(host.world.env())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("deploy finishes")
    .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let created = host.world.mock().last_create().unwrap();
    assert_eq!(created["image"], "orchestrator-base", "{created}");
    let list: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/sandboxes", host.world.mock().url()))
        .bearer_auth(TENSORLAKE_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = list["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "garrison-orchestrator")
        .expect("the deployment")["sandbox_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let dir = host.world.root.join("sandboxes").join(&id);
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace/tool.txt")).unwrap(),
        "from-the-image\n"
    );
    assert!(
        host.world.mock().process_starts().iter().any(|s| s["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("garrison-serve-"))),
        "serve was started from the copied binary"
    );
    let gone = tokio::process::Command::new(garrison_bin())
        .args(["deploy", "tensorlake", "--terminate"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", host.dir.path())
        .envs(host.world.env())
        .output()
        .await
        .unwrap();
    assert!(gone.status.success(), "{}", text(&gone));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_the_build_and_deletes_the_builder() {
    use tokio::io::AsyncBufReadExt;

    let host = Host::new();
    let recipe = host.recipe("steps = [\"echo waiting; sleep 600\"]\n");
    let mut child = tokio::process::Command::new(garrison_bin())
        .args([
            "image",
            "build",
            "slow",
            "--backend",
            "tensorlake",
            "--recipe",
        ])
        .arg(&recipe)
        .arg("--state-dir")
        .arg(host.dir.path().join("state"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", host.dir.path())
        .env(
            "TENSORLAKE_BUILD_PATH",
            format!(
                "{}:/usr/bin:/bin",
                host.dir.path().join("fake-bin").display()
            ),
        )
        .envs(host.world.env())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::time::timeout(common::HANG_GUARD, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("| waiting") {
                return;
            }
        }
        panic!("the build ended before its step ran");
    })
    .await
    .expect("the step starts");
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = tokio::time::timeout(common::HANG_GUARD, child.wait_with_output())
        .await
        .expect("the build stops")
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("interrupted"), "{stderr}");
    let deadline = std::time::Instant::now() + common::HANG_GUARD;
    while !host.sandboxes_left().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(host.sandboxes_left().is_empty(), "the builder is deleted");
}

/// A built-in recipe's name works where a recipe file does: the desktop
/// recipe's packages reach the builder (from a directory with no file of
/// that name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_desktop_recipe_builds_on_tensorlake() {
    let host = Host::new();
    let out = host
        .garrison(
            &["build", "garrison-desktop", "--backend", "tensorlake"],
            Some(Path::new("desktop")),
        )
        .await;
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    let install = printed
        .lines()
        .find(|l| l.contains("fake apt-get install"))
        .unwrap_or_else(|| panic!("no install in:\n{printed}"));
    for package in [
        "xvfb",
        "matchbox-window-manager",
        "chromium",
        "fonts-dejavu-core",
    ] {
        assert!(install.contains(package), "{package} in {install}");
    }
    assert!(
        printed.contains("built garrison-desktop on Tensorlake"),
        "{printed}"
    );
}
