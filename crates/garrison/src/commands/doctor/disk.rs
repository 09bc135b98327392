//! Free space in the state directory: what every backend's sessions,
//! images and snapshots need, whichever backend serves them.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::check::Check;

/// Below this, the state directory's free space is a warning.
pub(crate) const LOW_DISK_BYTES: u64 = 5 << 30;

/// Free space for Garrison's data: the state directory, or the nearest
/// existing parent when it does not exist yet.
pub(crate) fn disk_space(state_dir: &Path) -> Check {
    let name = "disk space";
    let Some(existing) = state_dir.ancestors().find(|p| p.exists()) else {
        return Check::info(name, format!("{} is not reachable", state_dir.display()));
    };
    match free_bytes(existing) {
        Ok(free) if free < LOW_DISK_BYTES => Check::warn(
            name,
            format!("{} free in {}", gib(free), existing.display()),
            "sessions' workspaces, images and snapshots need room: keep 5 GiB or more free",
        ),
        Ok(free) => Check::pass(
            name,
            format!("{} free in {}", gib(free), existing.display()),
        ),
        Err(e) => Check::info(name, format!("cannot tell: {e}")),
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Bytes available to unprivileged users on the filesystem holding `path`.
fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("path contains a NUL byte"))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: c_path is a valid C string; statvfs fills `stat` on success.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so `stat` is initialised.
    let stat = unsafe { stat.assume_init() };
    // Both fields are u64 on Linux x86_64, but not on every target.
    #[allow(clippy::unnecessary_cast)]
    let free = stat.f_bavail as u64 * stat.f_frsize as u64;
    Ok(free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_space_looks_at_the_nearest_existing_parent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let check = disk_space(&dir.path().join("not/yet"));
        assert!(check.detail.contains("free in"), "{check}");
        assert!(!check.is_blocking());
    }
}
