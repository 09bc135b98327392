//! Labels, which Tensorlake sandboxes do not have: Garrison keeps them in a
//! file inside the sandbox and a 0600 copy on this machine, so that listing
//! can name the session of a suspended sandbox without waking it. Listing
//! is here because finding a sandbox's labels again is most of it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandbox::format::{self, NewerFormat};
use sandbox::{Handle, Result, SandboxError, SandboxName};
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
            file.write_all(&format::TENSORLAKE_LABELS.to_vec(labels)?)?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            warn!(sandbox = %name, error = %e, "could not cache the sandbox's labels");
        }
    }

    async fn labels_of(
        &self,
        name: &SandboxName,
        info: &SandboxInfo,
    ) -> Result<BTreeMap<String, String>> {
        let local =
            read_local(&self.labels_path(name)).map_err(|e| SandboxError::Fatal(e.into()))?;
        if let Some(labels) = local {
            return Ok(labels);
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
            return Ok(labels);
        }
        Ok(BTreeMap::new())
    }
}

/// This machine's copy of a sandbox's labels at `path`: a JSON object of
/// strings with its `format` beside them (none before formats were
/// recorded). `None` when it is missing, too large or does not parse; an
/// error when a newer Garrison wrote it.
fn read_local(path: &Path) -> std::result::Result<Option<BTreeMap<String, String>>, NewerFormat> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(None);
    };
    if bytes.len() > MAX_LABELS_BYTES {
        return Ok(None);
    }
    format::TENSORLAKE_LABELS.check(path, &bytes)?;
    let Ok(mut fields) = serde_json::from_slice::<BTreeMap<String, serde_json::Value>>(&bytes)
    else {
        return Ok(None);
    };
    // A label may be called `format` too; only a number is the format.
    if fields
        .get("format")
        .is_some_and(serde_json::Value::is_number)
    {
        fields.remove("format");
    }
    Ok(fields
        .into_iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(value) => Some((key, value)),
            _ => None,
        })
        .collect())
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
        let labels = backend.labels_of(&name, &info).await?;
        out.push(backend.handle_for(&info.sandbox_id, name.as_str(), labels, info.image.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_without_a_format_read_and_newer_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garrison-s.json");
        let labels = sandbox::session_labels("devin-1", "outpost-1");
        // As releases before formats wrote it.
        std::fs::write(&path, serde_json::to_vec(&labels).unwrap()).unwrap();
        assert_eq!(read_local(&path).unwrap(), Some(labels.clone()));
        // As this one writes it.
        std::fs::write(&path, format::TENSORLAKE_LABELS.to_vec(&labels).unwrap()).unwrap();
        assert_eq!(read_local(&path).unwrap(), Some(labels.clone()));

        let mut newer = serde_json::to_value(&labels).unwrap();
        newer["format"] = 999.into();
        let newer = serde_json::to_vec(&newer).unwrap();
        std::fs::write(&path, &newer).unwrap();
        let message = read_local(&path).unwrap_err().to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
        assert_eq!(std::fs::read(&path).unwrap(), newer);
    }
}
