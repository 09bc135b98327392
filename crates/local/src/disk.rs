//! The session's writable layer lives on a loop-mounted ext4 image of
//! `SANDBOX_DISK_MB`, so a sandbox that writes past its size gets ENOSPC
//! inside the sandbox instead of filling the host's disk.

use std::path::Path;

use anyhow::{Context, bail};

use crate::cmd::run;

/// Creates a sparse image of `size_mb` and formats it. No journal (the
/// layer is disposable: a crash loses nothing a snapshot did not keep) and
/// no reserved blocks (the whole size is the sandbox's).
pub(crate) async fn create(image: &Path, size_mb: u64) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(image).with_context(|| format!("creating {}", image.display()))?;
    file.set_len(size_mb.saturating_mul(1024 * 1024))
        .context("sizing the sandbox disk")?;
    drop(file);
    run(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal",
            "-E",
            "nodiscard,lazy_itable_init=1",
        ],
        &[image.as_os_str()],
    )
    .await
    .context("formatting the sandbox disk (is e2fsprogs installed?)")
}

/// Mounts the image at `target` through a loop device that is freed when it
/// is unmounted.
pub(crate) async fn mount(image: &Path, target: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(target)?;
    run(
        "mount",
        &["-o", "loop,nosuid,nodev"],
        &[image.as_os_str(), target.as_os_str()],
    )
    .await
    .context("mounting the sandbox disk")
}

/// Mounts the overlay root: the image read-only below, the session's layer
/// above. `owner`: the host uid of the container's root when the layers are
/// idmapped (see `idmap`).
pub(crate) async fn mount_overlay(
    lower: &Path,
    upper: &Path,
    work: &Path,
    target: &Path,
    owner: Option<u32>,
) -> anyhow::Result<()> {
    for dir in [upper, work, target] {
        std::fs::create_dir_all(dir)?;
    }
    for p in [lower, upper, work] {
        let s = p.to_string_lossy();
        if s.contains([',', ':', '\n']) {
            bail!("{s:?} cannot be an overlay directory");
        }
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let target = target.to_owned();
    tokio::task::spawn_blocking(move || crate::idmap::mount_overlay_as(owner, &options, &target))
        .await?
        .context("mounting the overlay root")
}

/// Unmounts if mounted; a busy mount is detached lazily so destroy never
/// hangs on a process that still holds a file. Asks the kernel directly
/// rather than reading the mount table, whose size grows with every
/// sandbox on the host.
pub(crate) fn unmount(path: &Path) -> anyhow::Result<()> {
    use nix::errno::Errno;
    use nix::mount::{MntFlags, umount2};
    match umount2(path, MntFlags::empty()) {
        // Not a mount point, or not there at all: nothing to undo.
        Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => Ok(()),
        Err(_) => umount2(path, MntFlags::MNT_DETACH)
            .with_context(|| format!("unmounting {}", path.display())),
    }
}
