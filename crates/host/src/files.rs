//! Writing into a sandbox's directory, and the errors it fails with.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use sandbox::{Result, SandboxError};

/// Writes `bytes` to `target` whole or not at all: a temporary file,
/// synced, then renamed over it.
pub(crate) fn write_file(target: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).map_err(io_fatal(format!("creating {}", parent.display())))?;
    }
    let tmp = target.with_extension("garrison-tmp");
    let _ = fs::remove_file(&tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_fatal(format!("creating {}", tmp.display())))?;
    std::io::Write::write_all(&mut file, bytes)
        .map_err(io_fatal(format!("writing {}", tmp.display())))?;
    file.sync_all()
        .map_err(io_fatal(format!("syncing {}", tmp.display())))?;
    drop(file);
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))
        .map_err(io_fatal(format!("chmod {}", tmp.display())))?;
    fs::rename(&tmp, target).map_err(io_fatal(format!("renaming to {}", target.display())))
}

/// Creates `path` and its parents, readable by Garrison's user only.
pub(crate) fn mkdir_private(path: &Path) -> Result<()> {
    fs::create_dir_all(path).map_err(io_fatal(format!("creating {}", path.display())))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o700))
        .map_err(io_fatal(format!("restricting {}", path.display())))
}

/// A failure no retry mends.
pub(crate) fn fatal(e: impl Into<anyhow::Error>) -> SandboxError {
    SandboxError::Fatal(e.into())
}

/// An I/O failure no retry mends, with what was being done.
pub(crate) fn io_fatal(context: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e| SandboxError::Fatal(anyhow::Error::new(e).context(context))
}
