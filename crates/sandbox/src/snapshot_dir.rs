//! A directory of snapshot archives, shared by the backends that keep
//! snapshots on this machine (host, local).
//!
//! Each snapshot is `<id>.tar.zst` with a manifest `<id>.json` beside it (the
//! serialized [`SnapshotRef`]). Ids start with the sandbox's name, so any
//! Garrison sharing the directory finds a session's snapshots by name
//! ([`SnapshotDir::find_for`]) without the state store that recorded them.

use std::path::{Path, PathBuf};

use anyhow::anyhow;

use crate::error::{Result, SandboxError};
use crate::format::SNAPSHOT_MANIFEST;
use crate::lineage::Lineage;
use crate::names::SandboxName;
use crate::names::is_plain_id;
use crate::spec::SnapshotRef;

/// A directory of snapshot archives and their manifests.
#[derive(Clone, Debug)]
pub struct SnapshotDir {
    dir: PathBuf,
}

fn fatal(e: impl Into<anyhow::Error>) -> SandboxError {
    SandboxError::Fatal(e.into())
}

impl SnapshotDir {
    /// The snapshots in `dir` (created when the first is written).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A fresh snapshot reference for `name`, not yet written.
    pub fn new_ref(
        &self,
        backend: &str,
        name: &str,
        base_image: Option<String>,
        lineage: Option<Lineage>,
    ) -> SnapshotRef {
        new_ref(backend, name, base_image, lineage)
    }

    fn checked_id<'a>(&self, snapshot: &'a SnapshotRef) -> Result<&'a str> {
        if is_plain_id(&snapshot.id) {
            Ok(&snapshot.id)
        } else {
            Err(fatal(anyhow!("invalid snapshot id {:?}", snapshot.id)))
        }
    }

    /// Where the archive of `snapshot` lives (the id is checked first: it
    /// may come from a store another process wrote).
    pub fn archive_path(&self, snapshot: &SnapshotRef) -> Result<PathBuf> {
        Ok(self
            .dir
            .join(format!("{}.tar.zst", self.checked_id(snapshot)?)))
    }

    fn manifest_path(&self, snapshot: &SnapshotRef) -> Result<PathBuf> {
        Ok(self
            .dir
            .join(format!("{}.json", self.checked_id(snapshot)?)))
    }

    /// Completes a snapshot whose archive is written: sets its size and
    /// records the manifest, so others can find it by name. When the
    /// manifest cannot be written (a full disk) the archive goes too: no
    /// one could ever find it.
    pub fn record(&self, snapshot: SnapshotRef, size_bytes: u64) -> Result<SnapshotRef> {
        let snapshot = SnapshotRef {
            size_bytes,
            ..snapshot
        };
        if let Err(e) = self.write_manifest(&snapshot) {
            let _ = std::fs::remove_file(self.archive_path(&snapshot)?);
            return Err(e);
        }
        Ok(snapshot)
    }

    /// Records the finished snapshot so others can find it by name.
    fn write_manifest(&self, snapshot: &SnapshotRef) -> Result<()> {
        let bytes = SNAPSHOT_MANIFEST.to_vec(snapshot).map_err(fatal)?;
        shim::write_atomically(&self.manifest_path(snapshot)?, &bytes).map_err(fatal)
    }

    /// Whether the archive of `snapshot` exists.
    pub fn exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        Ok(self.archive_path(snapshot)?.exists())
    }

    /// Removes the archive and its manifest; a missing one is not an error.
    pub fn delete(&self, snapshot: &SnapshotRef) -> Result<()> {
        let _ = std::fs::remove_file(self.manifest_path(snapshot)?);
        match std::fs::remove_file(self.archive_path(snapshot)?) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(fatal(e)),
            _ => Ok(()),
        }
    }

    /// The snapshots of the sandbox `name` whose archives exist, oldest first.
    pub fn find_for(&self, name: &SandboxName) -> Result<Vec<SnapshotRef>> {
        self.manifests(&format!("{name}-"))
    }

    /// Deletes every snapshot in the directory made before `cutoff_ms`
    /// (Unix ms), whichever Garrison made it; returns those deleted. A
    /// restore reading one keeps its open file (unlinking does not cut a
    /// reader off); one about to open it finds it gone and starts fresh.
    pub fn collect_older_than(&self, cutoff_ms: i64) -> Result<Vec<SnapshotRef>> {
        let mut deleted = Vec::new();
        for snapshot in self.manifests("")? {
            if snapshot.created_at_ms < cutoff_ms {
                self.delete(&snapshot)?;
                deleted.push(snapshot);
            }
        }
        Ok(deleted)
    }

    /// The snapshots whose manifest names start with `prefix` and whose
    /// archives exist, oldest first. A manifest a newer Garrison wrote fails
    /// the whole listing, so nothing deletes a snapshot it cannot read.
    fn manifests(&self, prefix: &str) -> Result<Vec<SnapshotRef>> {
        let mut found = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(fatal(e)),
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if !(file.starts_with(prefix) && file.ends_with(".json")) {
                continue;
            }
            let path = entry.path();
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            SNAPSHOT_MANIFEST.check(&path, &bytes).map_err(fatal)?;
            if let Ok(snapshot) = serde_json::from_slice::<SnapshotRef>(&bytes)
                && self.exists(&snapshot).unwrap_or(false)
            {
                found.push(snapshot);
            }
        }
        found.sort_by_key(|s| s.created_at_ms);
        Ok(found)
    }
}

/// A fresh snapshot reference for the sandbox `name`, not yet written: its
/// id starts with the name, wherever it is kept. `lineage` is the
/// sandbox's (see [`Lineage::from_labels`]).
pub(crate) fn new_ref(
    backend: &str,
    name: &str,
    base_image: Option<String>,
    lineage: Option<Lineage>,
) -> SnapshotRef {
    let now = chrono::Utc::now().timestamp_millis();
    SnapshotRef {
        backend: backend.to_owned(),
        id: format!("{name}-{now}-{:08x}", rand::random::<u32>()),
        size_bytes: 0,
        created_at_ms: now,
        base_image,
        sha256: None,
        lineage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_find_snapshots_by_name_and_ids_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotDir::new(dir.path().to_owned());
        let name = SandboxName::for_session("s");
        let other = SandboxName::for_session("t");
        let a = store.new_ref("host", name.as_str(), None, None);
        std::fs::write(store.archive_path(&a).unwrap(), b"x").unwrap();
        store.write_manifest(&a).unwrap();
        let b = store.new_ref("host", other.as_str(), None, None);
        std::fs::write(store.archive_path(&b).unwrap(), b"x").unwrap();
        store.write_manifest(&b).unwrap();
        assert_eq!(store.find_for(&name).unwrap(), vec![a.clone()]);
        store.delete(&a).unwrap();
        store.delete(&a).unwrap();
        assert!(store.find_for(&name).unwrap().is_empty());
        let evil = SnapshotRef {
            id: "../../etc/passwd".into(),
            ..b
        };
        assert!(store.archive_path(&evil).is_err());
    }

    #[test]
    fn an_archive_whose_manifest_cannot_be_written_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotDir::new(dir.path().to_owned());
        let a = store.new_ref("host", SandboxName::for_session("s").as_str(), None, None);
        std::fs::write(store.archive_path(&a).unwrap(), b"x").unwrap();
        // A directory in the manifest's place: its write fails.
        let manifest = store.manifest_path(&a).unwrap();
        std::fs::create_dir_all(manifest.join("in-the-way")).unwrap();
        assert!(store.record(a.clone(), 1).is_err());
        assert!(!store.archive_path(&a).unwrap().exists());
    }

    #[test]
    fn manifests_without_a_format_read_and_newer_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotDir::new(dir.path().to_owned());
        let name = SandboxName::for_session("s");
        let a = store.new_ref("host", name.as_str(), None, None);
        std::fs::write(store.archive_path(&a).unwrap(), b"x").unwrap();
        let path = store.manifest_path(&a).unwrap();
        // As releases before formats wrote it.
        std::fs::write(&path, serde_json::to_vec(&a).unwrap()).unwrap();
        assert_eq!(store.find_for(&name).unwrap(), vec![a.clone()]);

        let mut newer = serde_json::to_value(&a).unwrap();
        newer["format"] = 999.into();
        let newer = serde_json::to_vec(&newer).unwrap();
        std::fs::write(&path, &newer).unwrap();
        let message = format!("{:#}", store.find_for(&name).unwrap_err());
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
        assert!(store.collect_older_than(i64::MAX).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), newer);
        assert!(store.exists(&a).unwrap());
    }
}
