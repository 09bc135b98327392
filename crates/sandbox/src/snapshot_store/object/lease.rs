//! The restore side of retention: a lease held while a snapshot is read,
//! and the downloaded archive it protects.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use object_store::path::Path;

use super::now_ms;
use crate::snapshot_store::collect::LEASE_TTL_MS;

/// A lease on one snapshot, rewritten while held.
pub(super) struct Lease {
    store: Arc<dyn ObjectStore>,
    path: Path,
    renewer: tokio::task::JoinHandle<()>,
}

impl Lease {
    pub(super) async fn take(
        store: Arc<dyn ObjectStore>,
        path: Path,
    ) -> object_store::Result<Self> {
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

    pub(super) async fn release(self) {
        self.renewer.abort();
        if let Err(e) = self.store.delete(&self.path).await {
            tracing::warn!(lease = %self.path, error = %e, "removing a snapshot lease failed; it expires on its own");
        }
    }
}

/// An archive ready to unpack on this machine. [`Fetched::release`] (or
/// dropping it) removes a downloaded copy and its lease.
pub struct Fetched {
    pub(super) path: PathBuf,
    /// Only for a downloaded copy, which is also removed.
    pub(super) lease: Option<Lease>,
}

impl Fetched {
    /// An archive that stays where it is (a snapshot directory).
    pub fn in_place(path: PathBuf) -> Self {
        Self { path, lease: None }
    }

    /// Where the archive is.
    pub fn path(&self) -> &FsPath {
        &self.path
    }

    /// Gives up the lease, if any, and removes a fetched copy.
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
