//! `--peer podman`: the start and the removal of the lifecycle figures done
//! by Podman, the engine a user would otherwise pick, in the same run, so
//! the report can give Garrison's figures as ratios (ours / Podman's).
//!
//! Podman gets the bench's own image (its root filesystem imported under a
//! fixed tag), the same limits (`--cpus`, `--memory`), no network (Garrison's
//! sandboxes have a network namespace with a veth and firewall rules; Podman
//! with `--network none` builds less), and the same command, with
//! `devin-remote-sim` bind-mounted read-only (Garrison copies it in, which
//! is in its figure), and modest open-file and process limits. Start: `podman run --rm` spawned -> the command's
//! first output line read from its stdout. Removal: `podman rm -f -t 0` of
//! that running container, as Garrison's destroy kills a running sandbox.
//!
//! Podman's storage is a directory of the bench's scratch directory
//! (`--root`), its run state a fresh directory under the system's temporary
//! directory (`--runroot`, `--tmpdir`; Podman refuses a run root path
//! longer than 50 bytes), so the machine's own Podman is never touched;
//! both are emptied and removed at the end, also after a failure.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::figures::{Lifecycle, header};
use crate::report::{Summary, round, row};

/// Bounds every step; a healthy one needs a small fraction of it.
const HANG_GUARD: Duration = Duration::from_secs(300);
/// Where the remote appears inside Podman's container.
const REMOTE_IN_CONTAINER: &str = "/usr/local/bin/devin-remote";

/// What the peer runs, and where it keeps its storage.
pub(super) struct PeerSetup {
    /// The image's root filesystem, as the local backend's store holds it.
    pub rootfs: PathBuf,
    /// The image's id in that store; the imported tag is made from it.
    pub image_id: String,
    /// The static `devin-remote-sim` the bench puts into every sandbox.
    pub binary: PathBuf,
    /// A directory of the scratch directory, for Podman's storage.
    pub dir: PathBuf,
    pub runs: usize,
    pub cpus: f64,
    pub memory_mb: u64,
}

/// Podman's figures, next to which Garrison's are given as ratios.
#[derive(Clone, Debug, Default)]
pub(super) struct PeerFigures {
    pub name: String,
    pub version: String,
    /// `podman run` spawned -> the first output line read, ms.
    pub start: Summary,
    /// `podman rm -f -t 0` of the running container, ms.
    pub remove: Summary,
}

impl PeerFigures {
    /// Garrison's create -> remote started p50 over the peer's start p50.
    pub(super) fn start_ratio(&self, ours: &Lifecycle) -> f64 {
        ratio(ours.total.p50, self.start.p50)
    }

    /// Garrison's destroy p50 over the peer's removal p50.
    pub(super) fn remove_ratio(&self, ours: &Lifecycle) -> f64 {
        ratio(ours.destroy.p50, self.remove.p50)
    }

    pub(super) fn table(&self, out: &mut String, ours: &Lifecycle) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "peer: {} {} (same image and limits, --network none), {} runs",
            self.name, self.version, self.start.n
        );
        header(out, "  (ms)");
        row(out, "  run -> first output line", &self.start);
        row(out, "  rm -f of the running container", &self.remove);
        let _ = writeln!(
            out,
            "  Garrison / {}: start {:.2}x, removal {:.2}x (below 1: Garrison is faster)",
            self.name,
            self.start_ratio(ours),
            self.remove_ratio(ours)
        );
    }

    pub(super) fn json(&self, ours: &Lifecycle) -> Value {
        json!({
            "name": self.name,
            "version": self.version,
            "start_to_first_output_ms": self.start.json(),
            "remove_ms": self.remove.json(),
            "ratios": {
                "start": round(self.start_ratio(ours)),
                "remove": round(self.remove_ratio(ours)),
            },
        })
    }
}

/// `ours / theirs`, 0 when there is nothing to divide by.
fn ratio(ours: f64, theirs: f64) -> f64 {
    if theirs > 0.0 { ours / theirs } else { 0.0 }
}

/// Imports the image, measures `runs` starts and removals, and empties and
/// removes Podman's storage whatever happened.
pub(super) async fn measure(setup: &PeerSetup) -> anyhow::Result<PeerFigures> {
    let run_dir = tempfile::Builder::new()
        .prefix("garrison-podman-")
        .tempdir()
        .context("creating podman's run directory")?
        .keep();
    let podman = Podman {
        dir: setup.dir.clone(),
        run_dir,
    };
    let measured = podman.measure(setup).await;
    let cleaned = podman.clean().await;
    let figures = measured?;
    cleaned.context("removing the peer's storage")?;
    Ok(figures)
}

struct Podman {
    /// Storage: images and containers' layers.
    dir: PathBuf,
    /// Run state and temporary files, at a short path.
    run_dir: PathBuf,
}

impl Podman {
    /// `podman` over the bench's own storage, without systemd or an event
    /// log (neither is what is measured, and a test machine may lack them).
    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("podman");
        command
            .arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.run_dir.join("run"))
            .arg("--tmpdir")
            .arg(self.run_dir.join("tmp"))
            .args([
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "none",
                "--storage-driver",
                "overlay",
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn call(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::time::timeout(HANG_GUARD, self.command().args(args).output())
            .await
            .with_context(|| format!("podman {} hung", args.join(" ")))?
            .context("running podman (scripts/setup installs it)")?;
        if !out.status.success() {
            bail!(
                "podman {} failed: {}",
                args.first().unwrap_or(&""),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    async fn measure(&self, setup: &PeerSetup) -> anyhow::Result<PeerFigures> {
        std::fs::create_dir_all(self.dir.join("root"))?;
        for sub in ["run", "tmp"] {
            std::fs::create_dir_all(self.run_dir.join(sub))?;
        }
        let version = self
            .call(&["version", "--format", "{{.Client.Version}}"])
            .await?;
        let tag = image_tag(&setup.image_id);
        self.import(&setup.rootfs, &tag).await?;
        let mut start = Vec::with_capacity(setup.runs);
        let mut remove = Vec::with_capacity(setup.runs);
        for i in 0..setup.runs {
            let (started, removed) = self.run_once(setup, &tag, i).await?;
            start.push(ms(started));
            remove.push(ms(removed));
        }
        Ok(PeerFigures {
            name: "podman".to_owned(),
            version,
            start: Summary::of(&start),
            remove: Summary::of(&remove),
        })
    }

    /// `podman import` of a tar of `rootfs`, unless the tag is there.
    async fn import(&self, rootfs: &Path, tag: &str) -> anyhow::Result<()> {
        if self.call(&["image", "exists", tag]).await.is_ok() {
            return Ok(());
        }
        let mut tar = tokio::process::Command::new("tar")
            .args(["--numeric-owner", "-C"])
            .arg(rootfs)
            .args(["-cf", "-", "."])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("running tar")?;
        let tar_out: Stdio = tar.stdout.take().context("tar stdout")?.try_into()?;
        let import = self
            .command()
            .args(["import", "-", tag])
            .stdin(tar_out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running podman import")?;
        let (tar_done, import_done) = tokio::time::timeout(HANG_GUARD, async {
            tokio::join!(tar.wait_with_output(), import.wait_with_output())
        })
        .await
        .context("importing the image into podman hung")?;
        let (tar_done, import_done) = (tar_done?, import_done?);
        if !tar_done.status.success() || !import_done.status.success() {
            bail!(
                "importing {} into podman failed: {} {}",
                rootfs.display(),
                String::from_utf8_lossy(&tar_done.stderr).trim(),
                String::from_utf8_lossy(&import_done.stderr).trim()
            );
        }
        Ok(())
    }

    /// One `podman run` to its first output line, then `podman rm -f` of
    /// the running container.
    async fn run_once(
        &self,
        setup: &PeerSetup,
        tag: &str,
        i: usize,
    ) -> anyhow::Result<(Duration, Duration)> {
        let name = format!("garrison-bench-peer-{i}");
        let mount = format!("{}:{REMOTE_IN_CONTAINER}:ro", setup.binary.display());
        let cpus = setup.cpus.to_string();
        let memory = format!("{}m", setup.memory_mb);
        let started = Instant::now();
        let mut run = self
            .command()
            .args(["run", "--rm", "--name", &name, "--network", "none"])
            .args(["--cpus", &cpus, "--memory", &memory, "-v", &mount])
            // Podman's defaults raise these past what root may set on some
            // machines (containers without CAP_SYS_RESOURCE), which fails
            // the start; lower limits cost nothing measured here.
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=4096:4096",
                tag,
            ])
            .args([
                "/bin/sh",
                "-c",
                "\"$0\" --version && exec sleep infinity",
                REMOTE_IN_CONTAINER,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running podman run")?;
        let stdout = run.stdout.take().context("podman stdout")?;
        let first = tokio::time::timeout(HANG_GUARD, BufReader::new(stdout).lines().next_line())
            .await
            .context("podman run printed nothing")??;
        let start = started.elapsed();
        if first.is_none() {
            let out = run.wait_with_output().await?;
            bail!(
                "podman run ended without output: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let removing = Instant::now();
        self.call(&["rm", "-f", "-t", "0", &name]).await?;
        let removed = removing.elapsed();
        let _ = tokio::time::timeout(HANG_GUARD, run.wait()).await;
        Ok((start, removed))
    }

    /// Removes every container and image, then the storage and run state
    /// themselves, first unmounting whatever Podman left mounted in them.
    async fn clean(&self) -> anyhow::Result<()> {
        if self.dir.exists() {
            let _ = self.call(&["rm", "-a", "-f", "-t", "0"]).await;
            let _ = self.call(&["rmi", "-a", "-f"]).await;
        }
        let mut mounts = mounts_under(&self.dir);
        mounts.extend(mounts_under(&self.run_dir));
        for mount in mounts {
            let status = tokio::process::Command::new("umount")
                .arg("--lazy")
                .arg(&mount)
                .status()
                .await?;
            if !status.success() {
                bail!("unmounting {} failed ({status})", mount.display());
            }
        }
        for dir in [&self.dir, &self.run_dir] {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", dir.display()));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The fixed tag an image of the local store is imported under.
fn image_tag(image_id: &str) -> String {
    let hex = image_id.trim_start_matches("sha256-");
    format!("localhost/garrison-bench:{}", &hex[..hex.len().min(12)])
}

/// Mount points at or under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|mount| mount.starts_with(dir))
        .collect();
    found.sort_by_key(|mount| std::cmp::Reverse(mount.components().count()));
    found.dedup();
    found
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_ours_over_the_peers() {
        let ours = Lifecycle {
            total: Summary::of(&[100.0]),
            destroy: Summary::of(&[50.0]),
            ..Default::default()
        };
        let peer = PeerFigures {
            start: Summary::of(&[400.0]),
            remove: Summary::of(&[200.0]),
            ..Default::default()
        };
        assert_eq!(peer.start_ratio(&ours), 0.25);
        assert_eq!(peer.remove_ratio(&ours), 0.25);
        assert_eq!(PeerFigures::default().start_ratio(&ours), 0.0);
    }

    #[test]
    fn the_tag_is_fixed_by_the_image_id() {
        assert_eq!(
            image_tag("sha256-0123456789abcdef0123"),
            "localhost/garrison-bench:0123456789ab"
        );
        assert_eq!(image_tag("short"), "localhost/garrison-bench:short");
    }
}
