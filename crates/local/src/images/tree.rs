//! Walking a finished tree: its size, and the digest that makes a built
//! image's id (see the parent module).

use std::collections::HashSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use anyhow::Context;
use sha2::{Digest, Sha256};

use super::Progress;

/// What [`walk`] found.
pub(crate) struct TreeInfo {
    /// SHA-256 over every entry, when asked for.
    pub digest: Option<[u8; 32]>,
    /// Bytes of file content, hard links counted once.
    pub size_bytes: u64,
}

/// Walks `root` in byte order of names. With `hash`, digests each entry's
/// relative path, type, mode, owner, and content (files), target
/// (symlinks) or device number; modification times are left out so that
/// identical trees get identical digests.
pub(crate) fn walk(root: &Path, hash: bool, progress: &dyn Progress) -> anyhow::Result<TreeInfo> {
    let mut state = Walk {
        hasher: hash.then(Sha256::new),
        seen_inodes: HashSet::new(),
        size_bytes: 0,
        progress,
        buf: vec![0; 1 << 16],
    };
    state.dir(root, Path::new(""))?;
    Ok(TreeInfo {
        digest: state.hasher.map(|h| h.finalize().into()),
        size_bytes: state.size_bytes,
    })
}

struct Walk<'a> {
    hasher: Option<Sha256>,
    seen_inodes: HashSet<(u64, u64)>,
    size_bytes: u64,
    progress: &'a dyn Progress,
    buf: Vec<u8>,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Path, rel: &Path) -> anyhow::Result<()> {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("listing {}", dir.display()))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let rel = rel.join(entry.file_name());
            let meta = fs::symlink_metadata(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let kind = meta.file_type();
            let detail = if kind.is_file() {
                if self.seen_inodes.insert((meta.dev(), meta.ino())) {
                    self.size_bytes += meta.len();
                    self.progress.bytes(self.size_bytes, None);
                }
                match self.hasher.is_some() {
                    true => self.file_digest(&path)?,
                    false => String::new(),
                }
            } else if kind.is_symlink() {
                fs::read_link(&path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .to_string_lossy()
                    .into_owned()
            } else if kind.is_char_device() || kind.is_block_device() {
                meta.rdev().to_string()
            } else {
                String::new()
            };
            if let Some(hasher) = &mut self.hasher {
                let line = format!(
                    "{}\0{:o}\0{}\0{}\0{}\n",
                    rel.to_string_lossy(),
                    meta.mode(),
                    meta.uid(),
                    meta.gid(),
                    detail
                );
                hasher.update(line.as_bytes());
            }
            if kind.is_dir() {
                self.dir(&path, &rel)?;
            }
        }
        Ok(())
    }

    fn file_digest(&mut self, path: &Path) -> anyhow::Result<String> {
        let mut file =
            fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
        let mut hasher = Sha256::new();
        loop {
            let n = file
                .read(&mut self.buf)
                .with_context(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            hasher.update(&self.buf[..n]);
        }
        Ok(hex::encode(hasher.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::NoProgress;

    #[test]
    fn digest_follows_content_not_times() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for dir in [a.path(), b.path()] {
            fs::create_dir(dir.join("d")).unwrap();
            fs::write(dir.join("d/f"), b"hello").unwrap();
            std::os::unix::fs::symlink("d/f", dir.join("l")).unwrap();
        }
        fs::hard_link(a.path().join("d/f"), a.path().join("h")).unwrap();
        fs::hard_link(b.path().join("d/f"), b.path().join("h")).unwrap();
        let ta = walk(a.path(), true, &NoProgress).unwrap();
        let tb = walk(b.path(), true, &NoProgress).unwrap();
        assert_eq!(ta.digest, tb.digest);
        assert_eq!(ta.size_bytes, 5, "hard link counted once");
        fs::write(b.path().join("d/f"), b"hellO").unwrap();
        assert_ne!(walk(b.path(), true, &NoProgress).unwrap().digest, ta.digest);
        assert!(walk(a.path(), false, &NoProgress).unwrap().digest.is_none());
    }
}
