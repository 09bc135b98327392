//! One stored copy of each executable, hard-linked into every sandbox.
//!
//! Every session's start puts the same `devin-remote` (megabytes) into its
//! sandbox. Writing and syncing it once per session was the largest step
//! of a start in a burst; instead the host backend keeps one copy per
//! SHA-256 in `<root>/executables/<sha256>` (file mode 0555, written once
//! per Garrison process) and hard-links it into each sandbox: a start
//! writes a directory entry, not the binary.
//!
//! Sharing one inode among sandboxes loses no isolation: the host backend
//! has none, and every session can already read and write everything the
//! Garrison user can, the stored copy included. What sharing adds is that a
//! session changing its copy in place (it is read-only, but its owner may
//! `chmod` it) would change every other session's copy. So before each
//! link the copy is compared with what was recorded when it was written
//! (inode, size, modification time, mode); on any difference it is written
//! again as a new inode, and later sessions get an unchanged binary. This
//! catches an accident, not a session that means harm (which can restore
//! the size, time and mode, or replace the binary in a running session):
//! against that the host backend offers nothing anyway.
//!
//! A copy left by a previous process is not trusted (nothing recorded it):
//! [`Executables::open`] removes them all, and each is written again on
//! first use.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, anyhow};
use sha2::{Digest, Sha256};

use sandbox::{Result, SandboxError};

/// The mode of a stored copy, and so of every sandbox's link to it.
const STORED_MODE: u32 = 0o555;

/// What a stored copy was like when this process wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
    /// File type and permission bits.
    mode: u32,
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Self {
        Self {
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
            mode: meta.mode(),
        }
    }
}

/// The stored copies of one host backend.
pub(super) struct Executables {
    dir: PathBuf,
    /// By SHA-256: the copies this process wrote. Held while a copy is
    /// checked and, when needed, written, so concurrent starts write it
    /// once.
    written: Mutex<HashMap<String, Stamp>>,
}

impl Executables {
    /// Opens `dir`, emptied of what earlier processes left (0700).
    pub(super) fn open(dir: PathBuf) -> anyhow::Result<Self> {
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("emptying {}", dir.display())),
        }
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", dir.display()))?;
        Ok(Self {
            dir,
            written: Mutex::new(HashMap::new()),
        })
    }

    /// Links the stored copy of `sha256` to `target` (a path on the host
    /// inside a sandbox) if this process wrote one and it is unchanged: the
    /// common case, which needs neither the bytes nor a write. `false`
    /// means [`Executables::put`] must do it. Blocks (a stat, a link and a
    /// rename): call it off the async workers.
    pub(super) fn link_stored(&self, target: &Path, sha256: &str) -> Result<bool> {
        check_sha256(sha256)?;
        let Some(stored) = self.unchanged(sha256) else {
            return Ok(false);
        };
        Ok(link_atomically(&stored, target).is_ok())
    }

    /// Puts the executable `bytes`, whose SHA-256 is `sha256`, at `target`
    /// (a path on the host inside a sandbox): a hard link to the stored
    /// copy, written first if needed, or, where a link cannot be made
    /// (another filesystem, too many links, a refusal), a file of its own
    /// written by `write_file`. Blocks: call it off the async workers.
    pub(super) fn put(
        &self,
        target: &Path,
        bytes: &[u8],
        sha256: &str,
        write_file: impl FnOnce(&Path, &[u8], u32) -> Result<()>,
    ) -> Result<()> {
        check_sha256(sha256)?;
        let linked = self
            .stored(sha256, bytes)?
            .and_then(|stored| link_atomically(&stored, target).map_err(anyhow::Error::new));
        match linked {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::warn!(
                    path = %target.display(),
                    error = %format!("{e:#}"),
                    "could not link the stored executable; writing a copy of its own"
                );
                write_file(target, bytes, 0o755)
            }
        }
    }

    /// The stored copy of `sha256`, if this process wrote it and it is as
    /// it was written.
    fn unchanged(&self, sha256: &str) -> Option<PathBuf> {
        let path = self.dir.join(sha256);
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let recorded = written.get(sha256)?;
        let meta = fs::symlink_metadata(&path).ok()?;
        (Stamp::of(&meta) == *recorded).then_some(path)
    }

    /// The path of an unchanged stored copy of `sha256`, written first if
    /// this process has none or it changed since. Bytes that are not what
    /// `sha256` names are refused (checked once per copy written: the
    /// digest names what every later session gets).
    fn stored(&self, sha256: &str, bytes: &[u8]) -> Result<anyhow::Result<PathBuf>> {
        let path = self.dir.join(sha256);
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(recorded) = written.get(sha256) {
            match fs::symlink_metadata(&path) {
                Ok(meta) if Stamp::of(&meta) == *recorded => return Ok(Ok(path)),
                Ok(meta) => tracing::warn!(
                    path = %path.display(),
                    recorded_ino = recorded.ino,
                    recorded_len = recorded.len,
                    found_ino = meta.ino(),
                    found_len = meta.len(),
                    "the stored executable changed; writing it again"
                ),
                // Removed (another backend opened on the same root empties
                // the directory): written again, as on first use.
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "the stored executable is gone; writing it again")
                }
            }
            written.remove(sha256);
        }
        let actual = hex::encode(Sha256::digest(bytes));
        if actual != sha256 {
            return Err(SandboxError::Fatal(anyhow!(
                "the executable's SHA-256 is {actual}, not the {sha256} it was put as"
            )));
        }
        Ok(write_stored(&self.dir, &path, bytes).map(|stamp| {
            written.insert(sha256.to_owned(), stamp);
            path
        }))
    }
}

/// Refuses anything but 64 lowercase hex digits: the digest names a file.
fn check_sha256(sha256: &str) -> Result<()> {
    if sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(SandboxError::Fatal(anyhow!(
            "{sha256:?} is not a lowercase hex SHA-256"
        )))
    }
}

/// Writes a new inode at `path` (a unique temporary name, synced, made
/// read-only, renamed over it) and returns its stamp.
fn write_stored(dir: &Path, path: &Path, bytes: &[u8]) -> anyhow::Result<Stamp> {
    let tmp = dir.join(format!(
        ".tmp-{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        file.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.display()))?;
        file.sync_all()
            .with_context(|| format!("syncing {}", tmp.display()))?;
        file.set_permissions(fs::Permissions::from_mode(STORED_MODE))
            .with_context(|| format!("chmod {}", tmp.display()))?;
        // Of the open file: what is renamed is this inode, whatever the
        // directory holds meanwhile.
        let stamp = Stamp::of(&file.metadata().context("stat of the stored copy")?);
        // Closed before it can be linked: a file open for writing cannot
        // be executed (ETXTBSY).
        drop(file);
        fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
        Ok(stamp)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Hard-links `stored` to `target` whole or not at all: a link beside the
/// target under a unique temporary name, renamed over it.
fn link_atomically(stored: &Path, target: &Path) -> std::io::Result<()> {
    let parent = target.parent().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no parent directory")
    })?;
    let name = target
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    fs::create_dir_all(parent)?;
    let mut tmp_name = name.to_owned();
    tmp_name.push(format!(".garrison-link-{:016x}", rand::random::<u64>()));
    let tmp = parent.join(tmp_name);
    fs::hard_link(stored, &tmp)?;
    fs::rename(&tmp, target).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha256(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    fn never_written(_: &Path, _: &[u8], _: u32) -> Result<()> {
        panic!("fell back to writing a copy")
    }

    #[test]
    fn only_lowercase_hex_digests_name_a_copy() {
        let good = sha256(b"x");
        assert!(check_sha256(&good).is_ok());
        for bad in [
            "../x".to_owned(),
            String::new(),
            good.to_ascii_uppercase(),
            good[..63].to_owned(),
            format!("{good}0"),
            format!("../{}", &good[3..]),
        ] {
            assert!(
                matches!(check_sha256(&bad), Err(SandboxError::Fatal(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn links_share_one_copy_until_it_changes() {
        let root = tempfile::tempdir().unwrap();
        let store = Executables::open(root.path().join("executables")).unwrap();
        let bytes = b"#!/bin/sh\necho one\n";
        let sha = sha256(bytes);
        let (a, b, c) = (
            root.path().join("a/bin/tool"),
            root.path().join("b/bin/tool"),
            root.path().join("c/bin/tool"),
        );
        // Nothing stored yet: the bytes are needed.
        assert!(!store.link_stored(&a, &sha).unwrap());
        store.put(&a, bytes, &sha, never_written).unwrap();
        assert!(store.link_stored(&b, &sha).unwrap());
        let stored = root.path().join("executables").join(&sha);
        let ino = |p: &Path| fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&a), ino(&stored));
        assert_eq!(ino(&b), ino(&stored));
        assert_eq!(fs::metadata(&stored).unwrap().nlink(), 3);
        assert_eq!(fs::metadata(&a).unwrap().mode() & 0o7777, STORED_MODE);

        // A session makes its copy writable and changes it in place.
        fs::set_permissions(&b, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(&b, "tampered").unwrap();
        assert!(!store.link_stored(&c, &sha).unwrap());
        store.put(&c, bytes, &sha, never_written).unwrap();
        assert_eq!(fs::read(&c).unwrap(), bytes);
        assert_ne!(ino(&c), ino(&b));
        assert_eq!(ino(&c), ino(&stored));

        // Gone (another backend on this root emptied the directory).
        fs::remove_file(&stored).unwrap();
        assert!(!store.link_stored(&a, &sha).unwrap());
        store.put(&a, bytes, &sha, never_written).unwrap();
        assert_eq!(fs::read(&a).unwrap(), bytes);
        assert_eq!(ino(&a), ino(&stored));
        // No temporary name is left beside the targets.
        assert_eq!(fs::read_dir(root.path().join("a/bin")).unwrap().count(), 1);
    }

    #[test]
    fn bytes_that_do_not_match_the_digest_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let store = Executables::open(root.path().join("executables")).unwrap();
        let target = root.path().join("a/tool");
        let put = store.put(&target, b"other", &sha256(b"expected"), never_written);
        assert!(matches!(put, Err(SandboxError::Fatal(_))), "{put:?}");
        assert!(!target.exists());
        assert_eq!(
            fs::read_dir(root.path().join("executables"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn opening_removes_what_an_earlier_process_left() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("executables");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(sha256(b"old")), "old").unwrap();
        Executables::open(dir.clone()).unwrap();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }
}
