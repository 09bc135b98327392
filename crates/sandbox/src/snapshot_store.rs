//! Where the backends that make their own archives (host, local) keep
//! snapshots: a directory on this machine (shared by any Garrison that
//! mounts it) or an object store every host reaches ([`object`]).
//!
//! A backend writes its archive to [`SnapshotStore::staging_path`], then
//! [`SnapshotStore::record`]s it (an object store uploads and drops the
//! local copy); to restore it [`SnapshotStore::fetch`]es the archive (an
//! object store downloads, checks and opens it into a spool file) and
//! releases it once unpacked.

mod collect;
mod crypt;
mod object;
mod staged;

use std::path::PathBuf;
use std::time::Duration;

pub use crypt::SnapshotKey;
pub use object::{Fetched, ObjectSnapshots, ObjectStoreSettings, PART_SIZE, check_url};

use crate::error::Result;
use crate::names::SandboxName;
use crate::snapshot_dir::SnapshotDir;
use crate::spec::SnapshotRef;

/// One backend's snapshots.
#[derive(Debug)]
pub enum SnapshotStore {
    /// Archives in a directory on this machine (which several Garrisons
    /// may share).
    Dir(SnapshotDir),
    /// Objects in S3, GCS or Azure Blob.
    Object(ObjectSnapshots),
}

impl SnapshotStore {
    /// The snapshots of backend `sub`: in `dir` (which holds the spool of
    /// an object store), or in the object store `object` names.
    pub fn open(
        dir: PathBuf,
        object: Option<&ObjectStoreSettings>,
        sub: &str,
    ) -> anyhow::Result<Self> {
        Ok(match object {
            None => Self::Dir(SnapshotDir::new(dir)),
            Some(settings) => Self::Object(ObjectSnapshots::open(settings, sub, dir)?),
        })
    }

    /// A fresh snapshot reference for `name`, not yet written.
    /// `lineage` is the sandbox's (see [`crate::Lineage::from_labels`]).
    pub fn new_ref(
        &self,
        backend: &str,
        name: &str,
        base_image: Option<String>,
        lineage: Option<crate::Lineage>,
    ) -> SnapshotRef {
        crate::snapshot_dir::new_ref(backend, name, base_image, lineage)
    }

    /// Where the backend writes the archive of `snapshot`.
    pub fn staging_path(&self, snapshot: &SnapshotRef) -> Result<PathBuf> {
        match self {
            Self::Dir(dir) => dir.archive_path(snapshot),
            Self::Object(store) => store.staging_path(snapshot),
        }
    }

    /// Completes a snapshot whose archive is written (`size_bytes` long),
    /// so others can find it by name.
    pub async fn record(&self, snapshot: SnapshotRef, size_bytes: u64) -> Result<SnapshotRef> {
        match self {
            Self::Dir(dir) => dir.record(snapshot, size_bytes),
            Self::Object(store) => store.upload(snapshot, size_bytes).await,
        }
    }

    /// The archive of `snapshot` on this machine, checked. Gone when it
    /// does not exist; [`crate::SandboxError::Corrupt`] when it fails its
    /// integrity check or cannot be opened.
    pub async fn fetch(&self, snapshot: &SnapshotRef) -> Result<Fetched> {
        match self {
            Self::Dir(dir) => Ok(Fetched::in_place(dir.archive_path(snapshot)?)),
            Self::Object(store) => store.fetch(snapshot).await,
        }
    }

    /// Whether `snapshot` is still stored.
    pub async fn exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        match self {
            Self::Dir(dir) => dir.exists(snapshot),
            Self::Object(store) => store.exists(snapshot).await,
        }
    }

    /// Deletes `snapshot`; a missing one is not an error.
    pub async fn delete(&self, snapshot: &SnapshotRef) -> Result<()> {
        match self {
            Self::Dir(dir) => dir.delete(snapshot),
            Self::Object(store) => store.delete(snapshot).await,
        }
    }

    /// The snapshots of the sandbox `name`, oldest first.
    pub async fn find_for(&self, name: &SandboxName) -> Result<Vec<SnapshotRef>> {
        match self {
            Self::Dir(dir) => dir.find_for(name),
            Self::Object(store) => store.find_for(name).await,
        }
    }

    /// Deletes the snapshots made before `cutoff_ms`, whichever Garrison
    /// made them; returns those deleted.
    pub async fn collect_older_than(&self, cutoff_ms: i64) -> Result<Vec<SnapshotRef>> {
        match self {
            Self::Dir(dir) => dir.collect_older_than(cutoff_ms),
            Self::Object(store) => store.collect_older_than(cutoff_ms).await,
        }
    }

    /// Removes staged files no snapshot owns (a pack or upload that failed
    /// or was killed, a restore that died) older than `min_age` and open in
    /// no file of this process; returns how many went.
    pub fn sweep_staged(&self, min_age: Duration) -> usize {
        let (dir, owned) = match self {
            Self::Dir(dir) => (dir.path(), staged::Owned::ByManifest),
            Self::Object(store) => (store.spool(), staged::Owned::Nothing),
        };
        let removed = staged::sweep(dir, owned, min_age);
        for path in &removed {
            tracing::info!(path = %path.display(), "removed a staged snapshot file no snapshot owns");
        }
        removed.len()
    }
}
