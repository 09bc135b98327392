//! Snapshots of a session's writable layer.
//!
//! GNU tar keeps what overlayfs needs to restore the layer exactly:
//! whiteouts (character devices 0:0 that hide deleted lower files), the
//! `trusted.overlay.opaque` attribute of directories that replace a lower
//! one, other extended attributes, ownership by number, and modes. zstd
//! compresses the stream on the fly.
//!
//! The layer is the sandbox's, so its shape is the attacker's: a sparse
//! file claims any size for free. Sparse files are packed as sparse (tar
//! reads only their data), and a pack is bounded in bytes written (the
//! kernel stops zstd at the limit) and in time. A restore is bounded in
//! time too, in proportion to the archive's size ([`restore_bound`]); what
//! the tools say is kept to its last few KiB (`bounded_output`).

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use sandbox::SandboxError;
use sandbox::bounded_output::wait_with_output;

mod split;
mod watchdog;

/// A restore's time bound: this much for any archive, plus
/// [`RESTORE_PER_MIB`] per MiB of it. A snapshot's content restores at
/// tens of MB a second; an archive of links and directories alone
/// (hundreds of thousands of members in a few MB) is the slow kind, and
/// 3 million hard links (about 10 MB) took 79 s, well inside it.
pub(crate) const RESTORE_BASE: Duration = Duration::from_secs(300);
pub(crate) const RESTORE_PER_MIB: Duration = Duration::from_secs(2);

/// How long restoring an archive of `bytes` may take.
pub(crate) fn restore_bound(bytes: u64) -> Duration {
    RESTORE_BASE + RESTORE_PER_MIB * u32::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u32::MAX)
}

/// POSIX (pax) format, which `--xattrs` needs anyway: every member is a
/// ustar header with its pax records, never an old GNU sparse or long-name
/// header, which is what the parallel restore ([`split`]) deals out.
const TAR_FLAGS: &[&str] = &[
    "--format=posix",
    "--xattrs",
    "--xattrs-include=*",
    "--numeric-owner",
    "--acls",
    "--selinux",
    "--sparse",
];

/// [`TAR_FLAGS`] without `--acls`: an ACL is also packed as the
/// `system.posix_acl_*` attribute, which `--xattrs` restores, while
/// `--acls` would set an ACL on every file, one that only repeats its mode
/// when it had none: a tenth of a restore's system time.
const UNTAR_FLAGS: &[&str] = &[
    "--xattrs",
    "--xattrs-include=*",
    "--numeric-owner",
    "--selinux",
    "--sparse",
];

/// What one pack may cost.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackLimits {
    /// Bytes of archive written at most.
    pub max_bytes: u64,
    /// Time the whole pack may take.
    pub max_time: Duration,
}

/// Archives `upper` (minus `exclude`, relative to it) into `archive`.
/// Returns the archive's size.
pub(crate) async fn pack(
    upper: &Path,
    exclude: &str,
    archive: &Path,
    limits: PackLimits,
) -> anyhow::Result<u64> {
    let partial = archive.with_extension("partial");
    let packed = tokio::time::timeout(
        limits.max_time,
        pack_to(upper, exclude, &partial, limits.max_bytes),
    )
    .await;
    let outcome = match packed {
        Ok(result) => result,
        Err(_) => Err(anyhow::anyhow!(
            "packing took longer than {} s; the snapshot was abandoned",
            limits.max_time.as_secs()
        )),
    };
    if let Err(e) = outcome {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::File::open(&partial)?.sync_all()?;
    std::fs::rename(&partial, archive)?;
    Ok(std::fs::metadata(archive)?.len())
}

async fn pack_to(
    upper: &Path,
    exclude: &str,
    partial: &Path,
    max_bytes: u64,
) -> anyhow::Result<()> {
    let out = std::fs::File::create(partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    std::fs::set_permissions(partial, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let mut tar = tokio::process::Command::new("tar")
        .args(TAR_FLAGS)
        .arg(format!("--exclude=./{exclude}"))
        .arg("-C")
        .arg(upper)
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running tar")?;
    let tar_out: Stdio = tar.stdout.take().context("tar stdout")?.try_into()?;
    let mut zstd = tokio::process::Command::new("zstd");
    zstd.args(["-q", "-3", "-T0", "-c"])
        .stdin(tar_out)
        .stdout(out)
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let limit = libc::rlimit {
        rlim_cur: max_bytes,
        rlim_max: max_bytes,
    };
    // SAFETY: only setrlimit and signal, async-signal-safe, between fork
    // and exec. Past the limit a write fails with EFBIG (SIGXFSZ ignored)
    // and zstd stops with an error.
    unsafe {
        zstd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let zstd = zstd.spawn().context("running zstd")?;
    let (tar_done, zstd_done) = tokio::join!(wait_with_output(tar), wait_with_output(zstd));
    let (tar_done, zstd_done) = (tar_done?, zstd_done?);
    if std::fs::metadata(partial).is_ok_and(|m| m.len() >= max_bytes) {
        bail!("the snapshot would exceed its limit of {max_bytes} bytes");
    }
    if !tar_done.status.success() {
        bail!("tar failed: {}", tar_done.stderr_text());
    }
    if !zstd_done.status.success() {
        bail!("zstd failed: {}", zstd_done.stderr_text());
    }
    Ok(())
}

/// Restores an archive made by [`pack`] into an empty `upper`: spread over
/// several `tar` processes (see [`split`]), or, when that fails (an archive
/// holding what snapshots never do, or a `tar` error), with one `tar` after
/// `upper` is emptied again, so the fast path never fails a restore the plain
/// one makes. `scratch`: a private directory on the host for spool files.
///
/// A snapshot that no attempt can restore fails with
/// [`SandboxError::Unrestorable`]: one holding a path longer than
/// `PATH_MAX`, or one whose restore outlasts [`restore_bound`] (its tars
/// are killed then; a bound this generous is only passed by an archive
/// shaped to cost, and another attempt would cost as much again).
pub(crate) async fn unpack(archive: &Path, upper: &Path, scratch: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::metadata(archive)
        .with_context(|| format!("reading {}", archive.display()))?
        .len();
    unpack_within(archive, upper, scratch, restore_bound(bytes)).await
}

/// [`unpack`] with the time bound given.
pub(crate) async fn unpack_within(
    archive: &Path,
    upper: &Path,
    scratch: &Path,
    bound: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let dog = Arc::new(watchdog::Watchdog::start(bound)?);
    let owned = (archive.to_owned(), upper.to_owned(), scratch.to_owned());
    let watching = dog.clone();
    let parallel = tokio::task::spawn_blocking(move || {
        let (archive, upper, scratch) = owned;
        split::unpack(&archive, &upper, &scratch, split::workers(), &watching)
    })
    .await?;
    if dog.expired() {
        return Err(out_of_time(bound));
    }
    let Err(e) = parallel else { return Ok(()) };
    if e.downcast_ref::<SandboxError>()
        .is_some_and(SandboxError::is_unrestorable)
    {
        return Err(e);
    }
    tracing::warn!(error = %format!("{e:#}"), "a parallel restore failed; restoring with one tar");
    empty(upper).context("emptying the layer for a second restore")?;
    let left = bound.saturating_sub(started.elapsed());
    match tokio::time::timeout(left, unpack_serial(archive, upper)).await {
        Ok(result) => result,
        // Dropped, the serial restore's children are killed.
        Err(_) => Err(out_of_time(bound)),
    }
}

fn out_of_time(bound: Duration) -> anyhow::Error {
    anyhow!(SandboxError::Unrestorable(format!(
        "restoring the snapshot took longer than its bound of {} s (5 minutes and 2 s per MiB \
         of archive); its tars were stopped and the snapshot is kept",
        bound.as_secs()
    )))
}

/// Removes what `dir` holds, following no symbolic link.
fn empty(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if std::fs::symlink_metadata(&path)?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Restores with one `zstd | tar`.
async fn unpack_serial(archive: &Path, upper: &Path) -> anyhow::Result<()> {
    let input =
        std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let mut zstd = tokio::process::Command::new("zstd")
        .args(["-q", "-d", "-c"])
        .stdin(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running zstd")?;
    let zstd_out: Stdio = zstd.stdout.take().context("zstd stdout")?.try_into()?;
    let tar = tokio::process::Command::new("tar")
        .args(UNTAR_FLAGS)
        .args(["-xpf", "-", "-C"])
        .arg(upper)
        .stdin(zstd_out)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("running tar")?;
    let (zstd_done, tar_done) = tokio::join!(wait_with_output(zstd), wait_with_output(tar));
    let (zstd_done, tar_done) = (zstd_done?, tar_done?);
    if !zstd_done.status.success() {
        bail!("zstd failed: {}", zstd_done.stderr_text());
    }
    if !tar_done.status.success() {
        let said = tar_done.stderr_text();
        // The one failure of tar's that a member's name alone causes.
        if said.contains("File name too long") {
            return Err(anyhow!(SandboxError::Unrestorable(format!(
                "tar cannot restore the snapshot: {said}"
            ))));
        }
        bail!("tar failed: {said}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    const LIMITS: PackLimits = PackLimits {
        max_bytes: 64 << 20,
        max_time: Duration::from_secs(300),
    };

    #[tokio::test]
    async fn a_sparse_terabyte_packs_and_restores_as_sparse() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir(&upper).unwrap();
        let huge = std::fs::File::create(upper.join("huge")).unwrap();
        huge.set_len(1 << 40).unwrap();
        std::os::unix::fs::FileExt::write_at(&huge, b"data at the end", (1 << 40) - 15).unwrap();
        let archive = dir.path().join("snap.tar.zst");
        let size = pack(&upper, ".garrison", &archive, LIMITS).await.unwrap();
        assert!(size < 1 << 20, "archive of {size} bytes");

        let restored = dir.path().join("restored");
        std::fs::create_dir(&restored).unwrap();
        unpack(&archive, &restored, dir.path()).await.unwrap();
        let meta = std::fs::metadata(restored.join("huge")).unwrap();
        assert_eq!(meta.len(), 1 << 40);
        assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
        let mut tail = [0u8; 15];
        std::os::unix::fs::FileExt::read_exact_at(
            &std::fs::File::open(restored.join("huge")).unwrap(),
            &mut tail,
            (1 << 40) - 15,
        )
        .unwrap();
        assert_eq!(&tail, b"data at the end");
    }

    /// An ACL the way the kernel stores it: user::rw-, user:1234:r--,
    /// group::r--, mask::r--, other::r--.
    const ACL: [u8; 44] = [
        2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 2, 0, 4, 0, 0xd2, 4, 0, 0, 4, 0, 4, 0, 255,
        255, 255, 255, 0x10, 0, 4, 0, 255, 255, 255, 255, 0x20, 0, 4, 0, 255, 255, 255, 255,
    ];

    fn acl_of(path: &Path) -> Option<Vec<u8>> {
        let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let name = c"system.posix_acl_access";
        let mut buf = [0u8; 256];
        // SAFETY: valid C strings and a buffer of the length given.
        let n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        (n > 0).then(|| buf[..n as usize].to_vec())
    }

    #[tokio::test]
    async fn an_acl_survives_a_restore() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir(&upper).unwrap();
        let file = upper.join("shared");
        std::fs::write(&file, b"x").unwrap();
        let path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid C strings and a buffer of the length given.
        let set = unsafe {
            libc::setxattr(
                path.as_ptr(),
                c"system.posix_acl_access".as_ptr(),
                ACL.as_ptr().cast(),
                ACL.len(),
                0,
            )
        };
        if set != 0 {
            eprintln!("skipped: this filesystem keeps no ACLs");
            return;
        }
        let archive = dir.path().join("snap.tar.zst");
        pack(&upper, ".garrison", &archive, LIMITS).await.unwrap();
        let restored = dir.path().join("restored");
        std::fs::create_dir(&restored).unwrap();
        unpack(&archive, &restored, dir.path()).await.unwrap();
        assert_eq!(acl_of(&restored.join("shared")).as_deref(), Some(&ACL[..]));
    }

    #[tokio::test]
    async fn a_restore_past_its_time_bound_is_unrestorable() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir(&upper).unwrap();
        std::fs::write(upper.join("f"), b"x").unwrap();
        let archive = dir.path().join("snap.tar.zst");
        pack(&upper, ".garrison", &archive, LIMITS).await.unwrap();
        let restored = dir.path().join("restored");
        std::fs::create_dir(&restored).unwrap();
        let err = unpack_within(&archive, &restored, dir.path(), Duration::ZERO)
            .await
            .unwrap_err();
        let e = err.downcast_ref::<SandboxError>().expect("a typed error");
        assert!(e.is_unrestorable(), "{e}");
        assert!(e.to_string().contains("longer than its bound"), "{e}");
        // The bound grows with the archive.
        assert_eq!(restore_bound(0), RESTORE_BASE);
        assert_eq!(restore_bound(10 << 20), RESTORE_BASE + 10 * RESTORE_PER_MIB);
    }

    #[tokio::test]
    async fn a_path_deeper_than_path_max_fails_fast_with_a_bounded_error() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir(&upper).unwrap();
        // Made relative to each directory in turn, as a session can.
        let mut deep = std::fs::File::open(&upper).unwrap();
        let name = std::ffi::CString::new("q".repeat(250)).unwrap();
        for _ in 0..20 {
            use std::os::fd::{AsRawFd, FromRawFd};
            // SAFETY: valid descriptors and C strings.
            let fd = unsafe {
                libc::mkdirat(deep.as_raw_fd(), name.as_ptr(), 0o755);
                libc::openat(
                    deep.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                )
            };
            assert!(fd >= 0);
            // SAFETY: a descriptor just opened and owned here.
            deep = unsafe { std::fs::File::from_raw_fd(fd) };
        }
        for n in 0..200 {
            let link = std::ffi::CString::new(format!("{}{n:08}", "L".repeat(190))).unwrap();
            let file = std::ffi::CString::new("f").unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: valid descriptors and C strings.
            unsafe {
                if n == 0 {
                    let fd = libc::openat(
                        deep.as_raw_fd(),
                        file.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY,
                        0o644,
                    );
                    assert!(fd >= 0);
                    libc::close(fd);
                }
                assert_eq!(
                    libc::linkat(
                        deep.as_raw_fd(),
                        file.as_ptr(),
                        deep.as_raw_fd(),
                        link.as_ptr(),
                        0
                    ),
                    0
                );
            }
        }
        let archive = dir.path().join("snap.tar.zst");
        pack(&upper, ".garrison", &archive, LIMITS).await.unwrap();
        let restored = dir.path().join("restored");
        std::fs::create_dir(&restored).unwrap();
        let err = unpack(&archive, &restored, dir.path()).await.unwrap_err();
        let e = err.downcast_ref::<SandboxError>().expect("a typed error");
        assert!(e.is_unrestorable(), "{e}");
        let text = format!("{err:#}");
        assert!(text.contains("PATH_MAX"), "{text}");
        assert!(text.len() < 1024, "{} bytes", text.len());
    }

    #[tokio::test]
    async fn a_pack_past_its_byte_limit_fails_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir(&upper).unwrap();
        // Incompressible, so the archive is as large as the data.
        let noise: Vec<u8> = (0..4 << 20).map(|_| rand::random::<u8>()).collect();
        std::fs::write(upper.join("noise"), noise).unwrap();
        let archive = dir.path().join("snap.tar.zst");
        let limits = PackLimits {
            max_bytes: 1 << 20,
            ..LIMITS
        };
        let err = pack(&upper, ".garrison", &archive, limits)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("exceed its limit"), "{err}");
        assert!(!archive.exists());
        assert!(!archive.with_extension("partial").exists());
    }
}
