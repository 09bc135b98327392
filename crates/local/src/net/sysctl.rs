//! The host's kernel settings networking needs.

use std::path::Path;

use anyhow::anyhow;

use sandbox::{Result, SandboxError};

/// Writes `/proc/sys/<key>`. The file is that of the calling thread's
/// network namespace, which is the host's: Garrison never changes a
/// thread's namespace (commands join one between fork and exec).
pub(crate) fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = Path::new("/proc/sys").join(key);
    if std::fs::read_to_string(&path).is_ok_and(|v| v.trim() == value) {
        return Ok(());
    }
    std::fs::write(&path, value)
        .map_err(|e| SandboxError::Fatal(anyhow!("setting {}: {e}", path.display())))
}
