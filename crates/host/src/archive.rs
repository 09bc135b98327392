//! A sandbox's filesystem as a snapshot archive: a zstd-compressed tar.

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use sandbox::{Result, SandboxError};

use crate::files::{fatal, io_fatal};

const ZSTD_LEVEL: i32 = 3;

/// Packs `fs_root` into `archive` (whole or not at all); returns its size.
pub(crate) fn pack(fs_root: &Path, archive: &Path) -> Result<u64> {
    let tmp = archive.with_extension("partial");
    let packed = pack_into(fs_root, &tmp, archive);
    if packed.is_err() {
        // A pack that failed part way (a full disk, above all) must not
        // leave its partial archive behind: nothing else owns it.
        let _ = fs::remove_file(&tmp);
    }
    packed
}

fn pack_into(fs_root: &Path, tmp: &Path, archive: &Path) -> Result<u64> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)
        .map_err(io_fatal(format!("creating {}", tmp.display())))?;
    let encoder = zstd::Encoder::new(file, ZSTD_LEVEL).map_err(fatal)?;
    let mut builder = tar::Builder::new(encoder);
    builder.follow_symlinks(false);
    builder
        .append_dir_all(".", fs_root)
        .map_err(io_fatal(format!("archiving {}", fs_root.display())))?;
    let encoder = builder.into_inner().map_err(fatal)?;
    let file = encoder.finish().map_err(fatal)?;
    file.sync_all().map_err(fatal)?;
    let size = file.metadata().map_err(fatal)?.len();
    fs::rename(tmp, archive).map_err(io_fatal(format!("renaming {}", archive.display())))?;
    Ok(size)
}

/// Unpacks `archive` into `target`; a missing archive is gone.
pub(crate) fn unpack(archive: &Path, target: &Path) -> Result<()> {
    let file = match fs::File::open(archive) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SandboxError::Gone(format!(
                "snapshot {}",
                archive.display()
            )));
        }
        Err(e) => return Err(io_fatal(format!("opening {}", archive.display()))(e)),
    };
    let decoder = zstd::Decoder::new(file).map_err(fatal)?;
    let mut tar = tar::Archive::new(decoder);
    tar.set_preserve_permissions(true);
    tar.set_preserve_mtime(true);
    // tar::Archive::unpack refuses entries that would land outside target.
    tar.unpack(target)
        .map_err(io_fatal(format!("restoring into {}", target.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_pack_leaves_no_partial_archive() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("snap.tar.zst");
        // The tree to pack is missing: the pack fails after it created its
        // partial file.
        assert!(pack(&dir.path().join("missing"), &archive).is_err());
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
