//! Labels, which Tensorlake sandboxes do not have: Garrison keeps them in a
//! file inside the sandbox and a 0600 copy on this machine, so that listing
//! can name the session of a suspended sandbox without waking it. Listing
//! is here because finding a sandbox's labels again is most of it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sandbox::{Handle, Result, SandboxName};
use tracing::warn;

use super::{TensorlakeBackend, map_err, plain};
use crate::models::{SandboxInfo, SandboxStatus};

pub(super) const LABELS_FILE: &str = "garrison-labels.json";

/// Largest labels file read back from a sandbox.
const MAX_LABELS_BYTES: usize = 64 << 10;

impl TensorlakeBackend {
    pub(super) fn labels_path(&self, name: &SandboxName) -> PathBuf {
        self.config
            .state_dir
            .join("labels")
            .join(format!("{name}.json"))
    }

    pub(super) fn save_labels(&self, name: &SandboxName, labels: &BTreeMap<String, String>) {
        let path = self.labels_path(name);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let tmp = path.with_extension("tmp");
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&serde_json::to_vec(labels)?)?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            warn!(sandbox = %name, error = %e, "could not cache the sandbox's labels");
        }
    }

    async fn labels_of(&self, name: &SandboxName, info: &SandboxInfo) -> BTreeMap<String, String> {
        if let Ok(bytes) = std::fs::read(self.labels_path(name))
            && bytes.len() <= MAX_LABELS_BYTES
            && let Ok(labels) = serde_json::from_slice(&bytes)
        {
            return labels;
        }
        // Another Garrison made it: read the copy inside, if that does not
        // wake it.
        if info.status == SandboxStatus::Running
            && let Ok(dp) = self
                .client
                .sandbox(&info.sandbox_id, info.sandbox_url.as_deref())
            && let Ok(bytes) = dp
                .get_file(&format!("{}/{LABELS_FILE}", self.root(&info.sandbox_id)))
                .await
            && bytes.len() <= MAX_LABELS_BYTES
            && let Ok(labels) = serde_json::from_slice(&bytes)
        {
            return labels;
        }
        BTreeMap::new()
    }
}

pub(super) async fn list(backend: &TensorlakeBackend) -> Result<Vec<Handle>> {
    let mut out = Vec::new();
    for info in backend.client.list_sandboxes().await.map_err(map_err)? {
        let Some(name) = info.name.as_deref().and_then(SandboxName::parse) else {
            continue;
        };
        if info.status.is_final() || !plain(&info.sandbox_id) {
            continue;
        }
        let labels = backend.labels_of(&name, &info).await;
        out.push(backend.handle_for(&info.sandbox_id, name.as_str(), labels, info.image.clone()));
    }
    Ok(out)
}
