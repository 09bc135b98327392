//! Snapshots of a session's writable layer.
//!
//! GNU tar keeps what overlayfs needs to restore the layer exactly:
//! whiteouts (character devices 0:0 that hide deleted lower files), the
//! `trusted.overlay.opaque` attribute of directories that replace a lower
//! one, other extended attributes, ownership by number, and modes. zstd
//! compresses the stream on the fly.

use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, bail};

const TAR_FLAGS: &[&str] = &[
    "--xattrs",
    "--xattrs-include=*",
    "--numeric-owner",
    "--acls",
    "--selinux",
];

/// Archives `upper` (minus `exclude`, relative to it) into `archive`.
/// Returns the archive's size.
pub async fn pack(upper: &Path, exclude: &str, archive: &Path) -> anyhow::Result<u64> {
    let partial = archive.with_extension("partial");
    let out = std::fs::File::create(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    std::fs::set_permissions(
        &partial,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    let mut tar = tokio::process::Command::new("tar")
        .args(TAR_FLAGS)
        .arg(format!("--exclude=./{exclude}"))
        .arg("-C")
        .arg(upper)
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running tar")?;
    let tar_out: Stdio = tar.stdout.take().context("tar stdout")?.try_into()?;
    let zstd = tokio::process::Command::new("zstd")
        .args(["-q", "-3", "-T0", "-c"])
        .stdin(tar_out)
        .stdout(out)
        .stderr(Stdio::piped())
        .spawn()
        .context("running zstd")?;
    let (tar_done, zstd_done) = tokio::join!(tar.wait_with_output(), zstd.wait_with_output());
    let (tar_done, zstd_done) = (tar_done?, zstd_done?);
    if !tar_done.status.success() {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "tar failed: {}",
            String::from_utf8_lossy(&tar_done.stderr).trim()
        );
    }
    if !zstd_done.status.success() {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "zstd failed: {}",
            String::from_utf8_lossy(&zstd_done.stderr).trim()
        );
    }
    std::fs::File::open(&partial)?.sync_all()?;
    std::fs::rename(&partial, archive)?;
    Ok(std::fs::metadata(archive)?.len())
}

/// Restores an archive made by [`pack`] into an empty `upper`.
pub async fn unpack(archive: &Path, upper: &Path) -> anyhow::Result<()> {
    let input =
        std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let mut zstd = tokio::process::Command::new("zstd")
        .args(["-q", "-d", "-c"])
        .stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running zstd")?;
    let zstd_out: Stdio = zstd.stdout.take().context("zstd stdout")?.try_into()?;
    let tar = tokio::process::Command::new("tar")
        .args(TAR_FLAGS)
        .args(["-xpf", "-", "-C"])
        .arg(upper)
        .stdin(zstd_out)
        .stderr(Stdio::piped())
        .spawn()
        .context("running tar")?;
    let (zstd_done, tar_done) = tokio::join!(zstd.wait_with_output(), tar.wait_with_output());
    let (zstd_done, tar_done) = (zstd_done?, tar_done?);
    if !zstd_done.status.success() {
        bail!(
            "zstd failed: {}",
            String::from_utf8_lossy(&zstd_done.stderr).trim()
        );
    }
    if !tar_done.status.success() {
        bail!(
            "tar failed: {}",
            String::from_utf8_lossy(&tar_done.stderr).trim()
        );
    }
    Ok(())
}
