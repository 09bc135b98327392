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
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreScheme, RetryConfig, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use url::Url;

use super::collect::{LEASE_TTL_MS, SnapshotSeen, Verdict, is_fresh, verdict};
use super::crypt::{Opener, Sealer, SnapshotKey};
use crate::names::is_plain_id;
use crate::{Result, SandboxError, SandboxName, SnapshotRef};

/// Bytes per uploaded part (S3 wants at least 5 MiB but for the last).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts in flight at once: memory stays near `PART_SIZE * (this + 1)`.
const PARTS_IN_FLIGHT: usize = 2;
const ARCHIVE: &str = ".tar.zst";
const MANIFEST: &str = ".json";

/// Where an object store is and how to reach it.
#[derive(Clone)]
pub struct ObjectStoreSettings {
    /// `s3://bucket/prefix`, `gs://…`, `az://…`: never with credentials,
    /// which the standard variables (`AWS_ACCESS_KEY_ID`, …) supply.
    pub url: Url,
    /// Extra settings of the store (`aws_endpoint`, …) over those of the
    /// environment: for tests and embedders.
    pub options: Vec<(String, String)>,
    /// Seals every archive written and requires every archive read to be
    /// sealed with it.
    pub key: Option<SnapshotKey>,
}

impl std::fmt::Debug for ObjectStoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let options: Vec<&str> = self.options.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("ObjectStoreSettings")
            .field("url", &self.url.as_str())
            .field("options", &options)
            .field("encrypted", &self.key.is_some())
            .finish()
    }
}

impl ObjectStoreSettings {
    pub fn new(url: Url) -> Self {
        Self {
            url,
            options: Vec::new(),
            key: None,
        }
    }
}

/// Checks a snapshot store URL: a scheme `object_store` serves, no
/// credentials, no query. The reason never repeats a password.
pub fn check_url(url: &Url) -> std::result::Result<(), String> {
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold credentials: set them in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, …)".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not have a query or fragment".into());
    }
    match ObjectStoreScheme::parse(url) {
        Ok((
            ObjectStoreScheme::AmazonS3
            | ObjectStoreScheme::GoogleCloudStorage
            | ObjectStoreScheme::MicrosoftAzure,
            _,
        )) => Ok(()),
        _ => Err(format!(
            "{}:// is not an object store Garrison keeps snapshots in: use s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or az://CONTAINER/PREFIX (or a directory)",
            url.scheme()
        )),
    }
}

fn build_store(settings: &ObjectStoreSettings) -> anyhow::Result<(Arc<dyn ObjectStore>, Path)> {
    let url = &settings.url;
    check_url(url).map_err(|reason| anyhow!("snapshot store {url}: {reason}"))?;
    let (scheme, prefix) = ObjectStoreScheme::parse(url)?;
    // A dead endpoint fails within seconds rather than minutes.
    let retry = RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(60),
        ..RetryConfig::default()
    };
    macro_rules! built {
        ($builder:ty) => {{
            let mut builder = <$builder>::from_env()
                .with_url(url.as_str())
                .with_retry(retry);
            for (key, value) in &settings.options {
                builder = builder.with_config(
                    key.parse()
                        .with_context(|| format!("snapshot store option {key}"))?,
                    value,
                );
            }
            Arc::new(builder.build()?) as Arc<dyn ObjectStore>
        }};
    }
    let store = match scheme {
        ObjectStoreScheme::AmazonS3 => built!(object_store::aws::AmazonS3Builder),
        ObjectStoreScheme::GoogleCloudStorage => {
            built!(object_store::gcp::GoogleCloudStorageBuilder)
        }
        ObjectStoreScheme::MicrosoftAzure => built!(object_store::azure::MicrosoftAzureBuilder),
        other => bail!("{other:?} is not a snapshot store"),
    };
    Ok((store, Path::parse(prefix)?))
}

fn transient(context: String) -> impl FnOnce(object_store::Error) -> SandboxError {
    move |e| match e {
        object_store::Error::NotFound { .. } => SandboxError::Gone(context),
        e => SandboxError::Transient(anyhow!(e).context(context)),
    }
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |e| SandboxError::Fatal(anyhow!(e).context(context))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
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

    pub async fn exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        match self.store.head(&self.object(&snapshot.id, ARCHIVE)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(transient(format!("looking up snapshot {}", snapshot.id))(e)),
        }
    }

    /// Removes the archive and its manifest; a missing one is not an error.
    pub async fn delete(&self, snapshot: &SnapshotRef) -> Result<()> {
        for suffix in [ARCHIVE, MANIFEST] {
            match self.store.delete(&self.object(&snapshot.id, suffix)?).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(transient(format!("deleting snapshot {}", snapshot.id))(e));
                }
            }
        }
        Ok(())
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

    /// Deletes every snapshot whose objects were last modified before
    /// `cutoff_ms`, whichever Garrison wrote it, unless a restore holds a
    /// fresh lease on it; returns those deleted (see the module's
    /// description for why a reader is never cut off).
    pub async fn collect_older_than(&self, cutoff_ms: i64) -> Result<Vec<SnapshotRef>> {
        let now = now_ms();
        let mut seen: std::collections::BTreeMap<String, SnapshotSeen> = Default::default();
        let blank = SnapshotSeen {
            modified_at: None,
            leased_at: None,
        };
        for (id, _, at) in self.top_level().await? {
            let entry = seen.entry(id).or_insert(blank);
            entry.modified_at = Some(entry.modified_at.map_or(at, |m| m.max(at)));
        }
        for (id, at, _) in self.listed_ids(&self.root.child("leases")).await? {
            let entry = seen.entry(id).or_insert(blank);
            entry.leased_at = Some(entry.leased_at.map_or(at, |m| m.max(at)));
        }
        let mut collected = Vec::new();
        for (id, seen) in seen {
            if verdict(&seen, cutoff_ms, now) == Verdict::Collect {
                match self.collect(&id, seen.modified_at).await {
                    Ok(Some(snapshot)) => collected.push(snapshot),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(snapshot = id, error = %e, "collecting an old snapshot failed")
                    }
                }
            }
        }
        // Left by collectors that died mid-way.
        for (_, at, path) in self.listed_ids(&self.root.child("doomed")).await? {
            if !is_fresh(at, now) {
                let _ = self.store.delete(&path).await;
            }
        }
        Ok(collected)
    }

    /// `(id, last modified, path)` of every object under `dir`, the id
    /// being the first path part below it.
    async fn listed_ids(&self, dir: &Path) -> Result<Vec<(String, i64, Path)>> {
        let listed: Vec<_> = self
            .store
            .list(Some(dir))
            .try_collect()
            .await
            .map_err(transient(format!("listing {dir} in {}", self.shown)))?;
        Ok(listed
            .into_iter()
            .filter_map(|meta| {
                let id = meta.location.prefix_match(dir)?.next()?.as_ref().to_owned();
                let at = meta.last_modified.timestamp_millis();
                is_plain_id(&id).then_some((id, at, meta.location))
            })
            .collect())
    }

    /// Removes this process's tombstone on `id`.
    async fn pardon(&self, id: &str) -> Result<()> {
        match self.store.delete(&self.tombstone(id)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(transient(format!(
                "removing the tombstone of snapshot {id}"
            ))(e)),
        }
    }

    /// Condemns `id` with this process's tombstone, looks at its leases
    /// again, and deletes it unless one is fresh; the snapshot deleted, if
    /// it was.
    async fn collect(&self, id: &str, modified_at: Option<i64>) -> Result<Option<SnapshotRef>> {
        let context = || format!("collecting snapshot {id}");
        self.store
            .put(
                &self.tombstone(id),
                Bytes::from(now_ms().to_string()).into(),
            )
            .await
            .map_err(transient(context()))?;
        let leases: Vec<_> = self
            .store
            .list(Some(&self.leases(id)))
            .try_collect()
            .await
            .map_err(transient(context()))?;
        let now = now_ms();
        if leases
            .iter()
            .any(|l| is_fresh(l.last_modified.timestamp_millis(), now))
        {
            self.pardon(id).await?;
            return Ok(None);
        }
        let snapshot = match self.manifest(id).await {
            Ok(snapshot) => snapshot,
            // An archive whose manifest never made it up (its upload died).
            Err(_) => SnapshotRef {
                backend: self.root.filename().unwrap_or_default().to_owned(),
                id: id.to_owned(),
                size_bytes: 0,
                created_at_ms: modified_at.unwrap_or(0),
                base_image: None,
                sha256: None,
            },
        };
        self.delete(&snapshot).await?;
        for lease in leases {
            let _ = self.store.delete(&lease.location).await;
        }
        self.pardon(id).await?;
        tracing::info!(
            snapshot = id,
            store = self.shown,
            "collected an old snapshot"
        );
        Ok(Some(snapshot))
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

/// A lease on one snapshot, rewritten while held.
struct Lease {
    store: Arc<dyn ObjectStore>,
    path: Path,
    renewer: tokio::task::JoinHandle<()>,
}

impl Lease {
    async fn take(store: Arc<dyn ObjectStore>, path: Path) -> object_store::Result<Self> {
        let write = {
            let (store, path) = (store.clone(), path.clone());
            move || {
                let (store, path) = (store.clone(), path.clone());
                async move {
                    store
                        .put(&path, Bytes::from(now_ms().to_string()).into())
                        .await
                }
            }
        };
        write().await?;
        let renew = write.clone();
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis((LEASE_TTL_MS / 4) as u64)).await;
                if let Err(e) = renew().await {
                    tracing::warn!(error = %e, "renewing a snapshot lease failed");
                }
            }
        });
        Ok(Self {
            store,
            path,
            renewer,
        })
    }

    async fn release(self) {
        self.renewer.abort();
        if let Err(e) = self.store.delete(&self.path).await {
            tracing::warn!(lease = %self.path, error = %e, "removing a snapshot lease failed; it expires on its own");
        }
    }
}

/// An archive ready to unpack on this machine. [`Fetched::release`] (or
/// dropping it) removes a downloaded copy and its lease.
pub struct Fetched {
    path: PathBuf,
    /// Only for a downloaded copy, which is also removed.
    lease: Option<Lease>,
}

impl Fetched {
    /// An archive that stays where it is (a snapshot directory).
    pub fn in_place(path: PathBuf) -> Self {
        Self { path, lease: None }
    }

    pub fn path(&self) -> &FsPath {
        &self.path
    }

    pub async fn release(mut self) {
        if let Some(lease) = self.lease.take() {
            let _ = tokio::fs::remove_file(&self.path).await;
            lease.release().await;
        }
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            let _ = std::fs::remove_file(&self.path);
            lease.renewer.abort();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(lease.release());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_credentials_or_other_schemes_are_refused() {
        let check = |s: &str| check_url(&Url::parse(s).unwrap());
        assert!(check("s3://bucket/prefix").is_ok());
        assert!(check("gs://bucket/prefix").is_ok());
        assert!(check("az://container/prefix").is_ok());
        let secret = check("s3://AKIA:hunter2@bucket/prefix").unwrap_err();
        assert!(secret.contains("credentials") && !secret.contains("hunter2"));
        assert!(check("s3://bucket/prefix?x=1").is_err());
        assert!(check("ftp://bucket/prefix").unwrap_err().contains("ftp://"));
        assert!(check("memory:///x").is_err());
    }

    #[test]
    fn debug_never_shows_option_values() {
        let settings = ObjectStoreSettings {
            options: vec![("aws_secret_access_key".into(), "hunter2".into())],
            key: Some(SnapshotKey::from_hex(&"ab".repeat(32)).unwrap()),
            ..ObjectStoreSettings::new(Url::parse("s3://b/p").unwrap())
        };
        let shown = format!("{settings:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("abab") && shown.contains("s3://b/p")
        );
    }
}
