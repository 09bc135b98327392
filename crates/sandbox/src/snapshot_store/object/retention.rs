//! Collection by age across hosts: tombstones, leases and the deletion
//! itself (see the parent module for why a reader is never cut off).

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;

use super::{ARCHIVE, MANIFEST, ObjectSnapshots, now_ms, transient};
use crate::error::Result;
use crate::names::is_plain_id;
use crate::snapshot_store::collect::{SnapshotSeen, Verdict, is_fresh, verdict};
use crate::spec::SnapshotRef;

impl ObjectSnapshots {
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

    /// Removes the archive, its manifest and every lease on it (a restore
    /// whose lease release was cut off leaves one, which would otherwise
    /// stay in the store for good); a missing one is not an error.
    pub async fn delete(&self, snapshot: &SnapshotRef) -> Result<()> {
        let context = || format!("deleting snapshot {}", snapshot.id);
        let leases: Vec<_> = self
            .store
            .list(Some(&self.leases(self.checked(&snapshot.id)?)))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(transient(context()))?;
        let objects = [ARCHIVE, MANIFEST]
            .into_iter()
            .map(|suffix| self.object(&snapshot.id, suffix))
            .collect::<Result<Vec<_>>>()?;
        for path in objects.into_iter().chain(leases) {
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(transient(context())(e)),
            }
        }
        Ok(())
    }

    /// `id`, checked to be a plain snapshot id.
    fn checked<'a>(&self, id: &'a str) -> Result<&'a str> {
        self.object(id, "")?;
        Ok(id)
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
                lineage: None,
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
}
