//! Staged files nobody owns any more: archives a snapshot wrote but never
//! recorded or uploaded (a store cut, a full disk, a kill mid-way), and
//! restore spool files whose restore died. Each is removed once it is
//! older than a minimum age and no file descriptor of this process has it
//! open, so a pack still writing (fresh mtime), an upload still reading or
//! a restore still unpacking (open file) keeps its file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// What a sweep of one directory may remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owned {
    /// A snapshot directory: an archive whose manifest exists is a
    /// snapshot (owned); a partial pack or an unmanifested archive is not.
    ByManifest,
    /// An object store's private spool: nothing there outlives its upload
    /// or restore.
    Nothing,
}

/// The files under `dir` this process has open now.
fn open_files() -> HashSet<PathBuf> {
    std::fs::read_dir("/proc/self/fd")
        .map(|fds| {
            fds.flatten()
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `file` (a name in a snapshot directory or spool) is staged
/// snapshot data: `.tar.zst` archives, `.tar.partial` packs, restore spools.
fn is_staged(file: &str) -> bool {
    file.ends_with(".tar.zst") || file.ends_with(".partial") || file.starts_with("restore-")
}

/// Removes the unowned staged files in `dir` older than `min_age`; returns
/// those removed.
pub(crate) fn sweep(dir: &Path, owned: Owned, min_age: Duration) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let open = open_files();
    let now = SystemTime::now();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !is_staged(&file) {
            continue;
        }
        if owned == Owned::ByManifest
            && let Some(id) = file.strip_suffix(".tar.zst")
            && dir.join(format!("{id}.json")).exists()
        {
            continue;
        }
        let path = entry.path();
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|at| now.duration_since(at).ok())
            .is_some_and(|age| age >= min_age);
        if !old || open.contains(&path) {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "removing a staged snapshot file failed")
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(paths: &[PathBuf]) -> Vec<String> {
        let mut names: Vec<String> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn unowned_staged_files_go_and_owned_open_or_young_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let at = |f: &str| dir.path().join(f);
        for f in [
            "a.tar.zst",
            "a.json",
            "b.tar.zst",
            "c.tar.partial",
            "restore-d-1.tar.zst",
            "other.txt",
            "open.tar.partial",
        ] {
            std::fs::write(at(f), b"x").unwrap();
        }
        let _held = std::fs::File::open(at("open.tar.partial")).unwrap();
        // Young files stay whatever they are.
        assert!(sweep(dir.path(), Owned::ByManifest, Duration::from_secs(3600)).is_empty());
        let removed = sweep(dir.path(), Owned::ByManifest, Duration::ZERO);
        assert_eq!(
            names(&removed),
            ["b.tar.zst", "c.tar.partial", "restore-d-1.tar.zst"]
        );
        assert!(at("a.tar.zst").exists() && at("a.json").exists());
        assert!(at("other.txt").exists() && at("open.tar.partial").exists());
        // In a spool, even an archive with a manifest beside it is staged.
        std::fs::write(at("e.tar.zst"), b"x").unwrap();
        let removed = sweep(dir.path(), Owned::Nothing, Duration::ZERO);
        assert_eq!(names(&removed), ["a.tar.zst", "e.tar.zst"]);
    }
}
