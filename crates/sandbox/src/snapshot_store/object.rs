//! Snapshots in an object store (S3 and S3-compatible servers, Google
//! Cloud Storage, Azure Blob), through the Apache Arrow project's
//! `object_store` crate.
//!
//! Under the store's prefix, for one backend (`<root>` = `<prefix>/<backend>`):
//!
//! ```text
//! <root>/<id>.tar.zst            the archive, sealed when a key is set (see crypt)
//! <root>/<id>.json               its manifest: the SnapshotRef with the sha256
//!                                of the stored object; written last, so a
//!                                snapshot is found only once complete
//! <root>/leases/<id>/<holder>    a restore reading the snapshot
//! <root>/doomed/<id>/<holder>    a collector deleting it
//! ```
//!
//! Archives go up as multipart uploads and come down as a stream into a
//! spool file, hashed (and opened) on the way: never whole in memory.
//!
//! **Retention across hosts.** Any Garrison sharing the store collects a
//! snapshot once its objects are older than the retention period, whoever
//! wrote it. A restore never loses the snapshot it reads, because both
//! sides write first and look second (the stores are strongly consistent):
//! the reader writes its lease, then lists the snapshot's tombstones and
//! backs off (the snapshot counts as gone) if there is one; a collector
//! writes its own tombstone, then lists the snapshot's leases and deletes
//! only if none is fresh, its tombstone last. Whichever order the two
//! interleave in, either the collector sees the lease or the reader sees the
//! tombstone (or the snapshot is already gone). A reader rewrites its lease
//! while it reads; a collector only ever removes its own tombstone, so
//! another collector's stays up for as long as that one works. A lease or
//! tombstone not written for [`LEASE_TTL_MS`] was left by a process that
//! died: it no longer counts, and the next pass removes such a tombstone.
//! Two collectors at once only repeat each other's deletions.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::collect::is_fresh;
use super::crypt::{Opener, Sealer, SnapshotKey};
use crate::error::{Result, SandboxError};
use crate::names::SandboxName;
use crate::names::is_plain_id;
use crate::spec::SnapshotRef;

mod lease;
mod retention;
mod settings;

use common::now_ms;
pub use lease::Fetched;
use lease::Lease;
use settings::build_store;
pub use settings::{ObjectStoreSettings, check_url};

/// Bytes per uploaded part (S3 wants at least 5 MiB but for the last).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts in flight at once: memory stays near `PART_SIZE * (this + 1)`.
const PARTS_IN_FLIGHT: usize = 2;
const ARCHIVE: &str = ".tar.zst";
const MANIFEST: &str = ".json";

fn transient(context: String) -> impl FnOnce(object_store::Error) -> SandboxError {
    move |e| match e {
        object_store::Error::NotFound { .. } => SandboxError::Gone(context),
        e => SandboxError::Transient(anyhow!(e).context(context)),
    }
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e| SandboxError::Fatal(anyhow!(e).context(context))
}

/// Names this process in lease objects: host, process, and a random part.
fn holder_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        .take(40)
        .collect();
    format!(
        "{}-{}-{:08x}",
        if host.is_empty() { "host" } else { &host },
        std::process::id(),
        rand::random::<u32>()
    )
}

/// One backend's snapshots in an object store, spooled through a local
/// directory.
pub struct ObjectSnapshots {
    store: Arc<dyn ObjectStore>,
    /// `<prefix>/<backend>`.
    root: Path,
    /// Where archives wait to go up and land coming down.
    spool: PathBuf,
    key: Option<SnapshotKey>,
    holder: String,
    /// The store's URL, for messages (it never holds credentials).
    shown: String,
}

impl std::fmt::Debug for ObjectSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectSnapshots({}/{})", self.shown, self.root)
    }
}

impl ObjectSnapshots {
    /// The snapshots of backend `sub` in the store `settings` name; `spool`
    /// must be a private directory on this machine.
    pub fn open(settings: &ObjectStoreSettings, sub: &str, spool: PathBuf) -> anyhow::Result<Self> {
        let (store, prefix) = build_store(settings)?;
        let root = if prefix.as_ref().is_empty() {
            Path::from(sub)
        } else {
            prefix.child(sub)
        };
        Ok(Self {
            store,
            root,
            spool,
            key: settings.key.clone(),
            holder: holder_name(),
            shown: settings.url.to_string(),
        })
    }

    fn object(&self, id: &str, suffix: &str) -> Result<Path> {
        if !is_plain_id(id) {
            return Err(SandboxError::Fatal(anyhow!("invalid snapshot id {id:?}")));
        }
        Ok(self.root.child(format!("{id}{suffix}")))
    }

    fn leases(&self, id: &str) -> Path {
        self.root.child("leases").child(id)
    }

    fn tombstones(&self, id: &str) -> Path {
        self.root.child("doomed").child(id)
    }

    /// This process's tombstone on `id`.
    fn tombstone(&self, id: &str) -> Path {
        self.tombstones(id).child(self.holder.as_str())
    }

    /// Whether a collector is deleting `id` now.
    async fn condemned(&self, id: &str) -> object_store::Result<bool> {
        let tombstones: Vec<_> = self
            .store
            .list(Some(&self.tombstones(id)))
            .try_collect()
            .await?;
        let now = now_ms();
        Ok(tombstones
            .iter()
            .any(|t| is_fresh(t.last_modified.timestamp_millis(), now)))
    }

    /// The private spool directory.
    pub(crate) fn spool(&self) -> &FsPath {
        &self.spool
    }

    /// Where an archive about to be uploaded is written.
    pub fn staging_path(&self, snapshot: &SnapshotRef) -> Result<PathBuf> {
        self.object(&snapshot.id, ARCHIVE)?;
        Ok(self.spool.join(format!("{}{ARCHIVE}", snapshot.id)))
    }

    /// Uploads the archive at [`Self::staging_path`] (sealed when a key is
    /// set), then its manifest; removes the local archive either way.
    pub async fn upload(&self, snapshot: SnapshotRef, size_bytes: u64) -> Result<SnapshotRef> {
        let staged = self.staging_path(&snapshot)?;
        let result = self.upload_staged(&staged, snapshot, size_bytes).await;
        let _ = tokio::fs::remove_file(&staged).await;
        result
    }

    async fn upload_staged(
        &self,
        staged: &FsPath,
        snapshot: SnapshotRef,
        size_bytes: u64,
    ) -> Result<SnapshotRef> {
        let id = snapshot.id.clone();
        let data = self.object(&id, ARCHIVE)?;
        let context = || format!("uploading snapshot {id} to {}", self.shown);
        let mut file = tokio::fs::File::open(staged)
            .await
            .map_err(io_error(format!("opening {}", staged.display())))?;
        let upload = self
            .store
            .put_multipart(&data)
            .await
            .map_err(transient(context()))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut hasher = Sha256::new();
        let mut sealer = self.key.as_ref().map(|key| {
            let (sealer, header) = Sealer::new(key, &id);
            hasher.update(&header);
            writer.write(&header);
            sealer
        });
        let mut buffer = vec![0; 256 * 1024];
        let streamed: Result<()> = async {
            loop {
                let n = file
                    .read(&mut buffer)
                    .await
                    .map_err(io_error(format!("reading {}", staged.display())))?;
                let out = match (&mut sealer, n) {
                    (_, 0) => break,
                    (Some(sealer), n) => sealer.push(&buffer[..n]),
                    (None, n) => buffer[..n].to_vec(),
                };
                hasher.update(&out);
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(transient(context()))?;
                writer.write(&out);
            }
            if let Some(sealer) = sealer.take() {
                let last = sealer.finish();
                hasher.update(&last);
                writer.write(&last);
            }
            Ok(())
        }
        .await;
        if let Err(e) = streamed {
            let _ = writer.abort().await;
            return Err(e);
        }
        writer.finish().await.map_err(transient(context()))?;
        let snapshot = SnapshotRef {
            size_bytes,
            sha256: Some(hex::encode(hasher.finalize())),
            ..snapshot
        };
        let manifest = serde_json::to_vec(&snapshot).map_err(|e| SandboxError::Fatal(e.into()))?;
        self.store
            .put(&self.object(&id, MANIFEST)?, manifest.into())
            .await
            .map_err(transient(context()))?;
        Ok(snapshot)
    }

    /// Whether the object of `snapshot` exists.
    pub async fn exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        match self.store.head(&self.object(&snapshot.id, ARCHIVE)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(transient(format!("looking up snapshot {}", snapshot.id))(e)),
        }
    }

    async fn manifest(&self, id: &str) -> Result<SnapshotRef> {
        let bytes = self
            .store
            .get(&self.object(id, MANIFEST)?)
            .await
            .map_err(transient(format!("snapshot {id}")))?
            .bytes()
            .await
            .map_err(transient(format!("reading the manifest of snapshot {id}")))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            SandboxError::Fatal(anyhow!(e).context(format!("manifest of snapshot {id}")))
        })
    }

    /// The objects directly under the root: `(id, suffix, last modified)`.
    async fn top_level(&self) -> Result<Vec<(String, &'static str, i64)>> {
        let listed = self
            .store
            .list_with_delimiter(Some(&self.root))
            .await
            .map_err(transient(format!("listing snapshots in {}", self.shown)))?;
        Ok(listed
            .objects
            .into_iter()
            .filter_map(|meta| {
                let file = meta.location.filename()?.to_owned();
                let at = meta.last_modified.timestamp_millis();
                [ARCHIVE, MANIFEST].into_iter().find_map(|suffix| {
                    let id = file.strip_suffix(suffix)?;
                    is_plain_id(id).then(|| (id.to_owned(), suffix, at))
                })
            })
            .collect())
    }

    /// The snapshots of the sandbox `name` whose archives and manifests
    /// exist, oldest first.
    pub async fn find_for(&self, name: &SandboxName) -> Result<Vec<SnapshotRef>> {
        let prefix = format!("{name}-");
        let objects = self.top_level().await?;
        let has = |id: &str, suffix: &str| objects.iter().any(|(i, s, _)| i == id && *s == suffix);
        let mut found = Vec::new();
        for (id, suffix, _) in &objects {
            if *suffix == MANIFEST && id.starts_with(&prefix) && has(id, ARCHIVE) {
                match self.manifest(id).await {
                    Ok(snapshot) if snapshot.id == *id => found.push(snapshot),
                    Ok(_) => {
                        tracing::warn!(snapshot = id, "a manifest names another snapshot; ignored")
                    }
                    Err(e) => {
                        tracing::warn!(snapshot = id, error = %e, "unreadable snapshot manifest")
                    }
                }
            }
        }
        found.sort_by_key(|s| s.created_at_ms);
        Ok(found)
    }

    /// Downloads, checks and opens the archive of `snapshot` into a spool
    /// file, holding a lease on it until the [`Fetched`] is released.
    pub async fn fetch(&self, snapshot: &SnapshotRef) -> Result<Fetched> {
        let id = snapshot.id.clone();
        self.object(&id, ARCHIVE)?;
        // One lease per restore, even two of one snapshot in this process.
        let holder = format!("{}-{:08x}", self.holder, rand::random::<u32>());
        let lease = Lease::take(self.store.clone(), self.leases(&id).child(holder))
            .await
            .map_err(transient(format!("leasing snapshot {id}")))?;
        match self.condemned(&id).await {
            Ok(false) => {}
            Ok(true) => {
                lease.release().await;
                return Err(SandboxError::Gone(format!(
                    "snapshot {id} (being deleted by a retention sweep)"
                )));
            }
            Err(e) => {
                lease.release().await;
                return Err(transient(format!("snapshot {id}"))(e));
            }
        }
        let spooled = self.spool.join(format!(
            "restore-{id}-{:08x}{ARCHIVE}",
            rand::random::<u32>()
        ));
        let result = self.download(snapshot, &spooled).await;
        match result {
            Ok(()) => Ok(Fetched {
                path: spooled,
                lease: Some(lease),
            }),
            Err(e) => {
                let _ = tokio::fs::remove_file(&spooled).await;
                lease.release().await;
                Err(e)
            }
        }
    }

    async fn download(&self, snapshot: &SnapshotRef, spooled: &FsPath) -> Result<()> {
        let id = &snapshot.id;
        let expected = match &snapshot.sha256 {
            Some(sha) => sha.clone(),
            None => self.manifest(id).await?.sha256.ok_or_else(|| {
                SandboxError::Corrupt(format!(
                    "snapshot {id} in {} has no recorded sha256 to check it against; refusing to restore it (the object is kept)",
                    self.shown
                ))
            })?,
        };
        let got = self
            .store
            .get(&self.object(id, ARCHIVE)?)
            .await
            .map_err(transient(format!("snapshot {id}")))?;
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(spooled)
            .await
            .map_err(io_error(format!("creating {}", spooled.display())))?;
        // Network chunks are small; each write of a tokio file is a trip
        // to the blocking pool.
        let mut file = tokio::io::BufWriter::with_capacity(1 << 20, file);
        let mut stream = got.into_stream();
        let mut hasher = Sha256::new();
        let mut opener = Some(Opener::new(self.key.as_ref(), id));
        let mut open_error = None;
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(transient(format!("downloading snapshot {id}")))?
        {
            let chunk: Bytes = chunk;
            hasher.update(&chunk);
            // After a failure to open, the rest is only hashed: a hash
            // mismatch says "damaged" more surely than the opener can.
            if let Some(o) = &mut opener {
                match o.push(&chunk) {
                    Ok(plain) => file
                        .write_all(&plain)
                        .await
                        .map_err(io_error(format!("writing {}", spooled.display())))?,
                    Err(e) => {
                        open_error = Some(e);
                        opener = None;
                    }
                }
            }
        }
        let actual = hex::encode(hasher.finalize());
        if actual != expected {
            return Err(SandboxError::Corrupt(format!(
                "snapshot {id} in {} failed its integrity check: the stored object's sha256 is {actual}, but {expected} was recorded; refusing to restore it (the object is kept)",
                self.shown
            )));
        }
        let rest = match opener {
            Some(o) => o.finish(),
            None => Err(open_error.expect("an opener is dropped only on an error")),
        };
        let rest = rest.map_err(|e| {
            SandboxError::Corrupt(format!(
                "snapshot {id} in {} cannot be opened: {e}; refusing to restore it (the object is kept)",
                self.shown
            ))
        })?;
        file.write_all(&rest)
            .await
            .map_err(io_error(format!("writing {}", spooled.display())))?;
        file.flush()
            .await
            .map_err(io_error(format!("writing {}", spooled.display())))?;
        file.get_ref()
            .sync_all()
            .await
            .map_err(io_error(format!("writing {}", spooled.display())))?;
        Ok(())
    }

    /// Writes, reads back and deletes a probe object, for `garrison
    /// doctor`: each step with its outcome.
    pub async fn probe(&self) -> Vec<(&'static str, std::result::Result<(), String>)> {
        let path = self.root.child(format!("probe-{}", self.holder));
        let body = Bytes::from(format!("garrison doctor probe {}", self.holder));
        let mut steps = Vec::new();
        let wrote = self.store.put(&path, body.clone().into()).await;
        let wrote_ok = wrote.is_ok();
        steps.push((
            "write a probe object",
            wrote.map(drop).map_err(|e| e.to_string()),
        ));
        if !wrote_ok {
            return steps;
        }
        let read = match self.store.get(&path).await {
            Ok(got) => match got.bytes().await {
                Ok(bytes) if bytes == body => Ok(()),
                Ok(_) => Err("read back different bytes".to_owned()),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        steps.push(("read it back", read));
        let deleted = self.store.delete(&path).await;
        steps.push(("delete it", deleted.map_err(|e| e.to_string())));
        steps
    }

    /// The store's URL (without credentials, which it never holds).
    pub fn shown(&self) -> &str {
        &self.shown
    }
}
