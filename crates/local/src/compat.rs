//! Making Debian 12's tools work under Debian 12's runsc.
//!
//! gVisor's 2022-12 release refuses `statx(2)` and `newfstatat(2)` with
//! `EINVAL` when the flags hold `AT_NO_AUTOMOUNT`, which coreutils always
//! passes: `ls DIR` and `stat FILE` fail in the sandbox. A small library
//! (`native/runsc_compat.c`, built by `build.rs`) wraps those calls to drop
//! the flag (gVisor has no automount points, so it means nothing there),
//! and `/etc/ld.so.preload` has every dynamically linked program load it.
//! Preloading, rather than `LD_PRELOAD`, leaves the session's environment
//! exactly as asked.

use std::io;

use crate::oci::GARRISON_DIR;
use crate::rootfs::Root;

/// Where the library goes in every sandbox's root.
pub(crate) const LIB: &str = "/.garrison/lib/runsc-compat.so";
const PRELOAD: &str = "/etc/ld.so.preload";

/// The library, built for this machine by `build.rs`.
static LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/runsc_compat.so"));

/// Installs the library; with `preload`, names it in `/etc/ld.so.preload`
/// (after whatever the image lists there). The library is installed in
/// every sandbox, runc's too: a snapshot made under runsc keeps its
/// `/etc/ld.so.preload` (`/.garrison` is not snapshotted), and a restore
/// under runc must find what it names.
pub(crate) fn install(root: &Root, preload: bool) -> io::Result<()> {
    root.create_dir_all(&format!("{GARRISON_DIR}/lib"), 0o755)?;
    root.write(LIB, LIBRARY, 0o644)?;
    if !preload {
        return Ok(());
    }
    let listed = root.read_small(PRELOAD, 64 * 1024).unwrap_or_default();
    let listed = String::from_utf8_lossy(&listed);
    if listed.split_whitespace().any(|entry| entry == LIB) {
        return Ok(());
    }
    root.write(PRELOAD, preload_text(&listed).as_bytes(), 0o644)
}

/// `/etc/ld.so.preload` with [`LIB`] added after what `listed` held.
fn preload_text(listed: &str) -> String {
    let mut text = listed.trim_end().to_owned();
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str(LIB);
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_added_after_the_images_own_entries() {
        assert_eq!(preload_text(""), format!("{LIB}\n"));
        assert_eq!(preload_text("/lib/x.so\n"), format!("/lib/x.so\n{LIB}\n"));
        assert!(LIB.starts_with(GARRISON_DIR));
        // An ELF shared object.
        assert_eq!(&LIBRARY[..4], b"\x7fELF");
    }
}
