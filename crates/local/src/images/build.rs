//! `garrison image build`: a recipe becomes a Debian root filesystem.
//!
//! `mmdebstrap --variant=minbase` bootstraps the suite with the recipe's
//! packages into the store's `tmp/` (about 250 MB and 20 s for the default
//! recipe). The recipe's steps run as mmdebstrap customize hooks, each
//! `chroot "$1" /bin/sh -ec "$GARRISON_STEP_<i>"`: that is our build
//! container. We chose chroot-in-a-hook over a runc bundle because
//! mmdebstrap already mounts `/proc`, `/sys` and `/dev` for its hooks in
//! its own mount namespace, provides a working `resolv.conf` and apt
//! sources, and unmounts everything even when a step fails, so a failed
//! step cannot leave mounts behind. A step's text travels in an environment
//! variable, never spliced into a command line, so no quoting can break
//! it. Steps run before mmdebstrap's cleanup, so they may use `apt-get`
//! without `apt-get update`.
//!
//! Steps run as root with the host's network: a recipe is trusted like a
//! Dockerfile its administrator wrote, not like a session.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, anyhow, bail};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::info::write_image_info;
use super::names::{id_from_digest, validate_name};
use super::progress;
use super::store::ImageStore;
use super::{Image, Progress, Recipe, tree};

/// Lines of mmdebstrap's output kept for the error when it fails.
const TAIL_LINES: usize = 30;

/// Environment variables passed through to mmdebstrap and the steps, so
/// builds work behind a proxy.
const PASSED_ENV: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

impl ImageStore {
    /// Builds an image from a recipe with mmdebstrap and names it `name`.
    /// Needs root. See the module documentation.
    pub async fn build(
        &self,
        name: &str,
        recipe: &Recipe,
        progress: &dyn Progress,
    ) -> anyhow::Result<Image> {
        build(self, name, recipe, progress).await
    }
}

async fn build(
    store: &ImageStore,
    name: &str,
    recipe: &Recipe,
    progress: &dyn Progress,
) -> anyhow::Result<Image> {
    validate_name(name)?;
    recipe.validate()?;
    let mmdebstrap = find_program("mmdebstrap").ok_or_else(|| {
        anyhow!(
            "mmdebstrap is not installed (or not on PATH): install it with `apt-get install mmdebstrap` (scripts/setup does)"
        )
    })?;
    if !nix::unistd::geteuid().is_root() {
        bail!("building an image needs root (mmdebstrap's root mode, chroot for the steps)");
    }
    let work = store.temp_dir()?;
    let rootfs = work.rootfs();

    progress.stage("bootstrap");
    let mut command = tokio::process::Command::new(&mmdebstrap);
    command
        .arg("--variant=minbase")
        .arg("--mode=root")
        .arg("--format=directory")
        .arg(format!("--include={}", recipe.all_packages().join(",")));
    command
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    for key in PASSED_ENV {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    for (i, step) in recipe.steps.iter().enumerate() {
        command.env(format!("GARRISON_STEP_{i}"), step);
        command.arg(format!(
            "--customize-hook=chroot \"$1\" /bin/sh -ec \"$GARRISON_STEP_{i}\""
        ));
    }
    command.arg("--").arg(&recipe.suite).arg(&rootfs);
    if let Some(mirror) = &recipe.mirror {
        command.arg(mirror);
    }
    // Without a mirror argument, mmdebstrap reads apt sources from a
    // non-terminal stdin: give it none.
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", mmdebstrap.display()))?;
    let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
    let stderr = BufReader::new(child.stderr.take().expect("piped")).lines();
    let tail = follow_output(stdout, stderr, progress).await;
    let status = child.wait().await.context("waiting for mmdebstrap")?;
    if !status.success() {
        bail!(
            "mmdebstrap failed ({status}) building {name:?}; its last output:\n{}",
            Vec::from(tail).join("\n")
        );
    }

    progress.stage("finalize");
    let recipe_hash = recipe.hash();
    let mut image = Image {
        id: String::new(),
        name: name.to_owned(),
        rootfs: PathBuf::new(),
        created_at_ms: chrono::Utc::now().timestamp_millis(),
        size_bytes: 0,
        chrome_path: recipe.chrome_path(),
        xvfb_path: recipe.xvfb_path(),
        source: format!("recipe:{recipe_hash}"),
    };
    let store = store.clone();
    progress::blocking(progress, move |p| {
        write_image_info(&rootfs, &image)?;
        let info = tree::walk(&rootfs, true, p)?;
        let tree_digest = hex::encode(info.digest.expect("asked for a digest"));
        let description =
            format!("garrison-image-v1\nbuild\nrecipe:{recipe_hash}\ntree:{tree_digest}\n");
        image.id = id_from_digest(&Sha256::digest(description.as_bytes()));
        image.size_bytes = info.size_bytes;
        store.install(work, image)
    })
    .await
}

/// Forwards mmdebstrap's output to `progress` (a new stage when the steps
/// begin) and returns its last lines.
async fn follow_output(
    mut stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    mut stderr: tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    progress: &dyn Progress,
) -> VecDeque<String> {
    let mut tail = VecDeque::with_capacity(TAIL_LINES);
    let (mut out_open, mut err_open) = (true, true);
    let mut in_steps = false;
    let mut handle = |line: String| {
        // The kept tail goes into an error: bounded whatever a step prints.
        let line = sandbox::bounded_output::clip(&line, 2048).into_owned();
        if !in_steps && line.contains("customize-hook") {
            in_steps = true;
            progress.stage("steps");
        }
        progress.detail(&line);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    };
    loop {
        tokio::select! {
            line = stdout.next_line(), if out_open => match line {
                Ok(Some(line)) => handle(line),
                _ => out_open = false,
            },
            line = stderr.next_line(), if err_open => match line {
                Ok(Some(line)) => handle(line),
                _ => err_open = false,
            },
            else => break,
        }
    }
    tail
}

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
