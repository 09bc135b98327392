//! Which images the `local` backend's sandboxes and snapshots use, so
//! `garrison image rm` can refuse and say who.
//!
//! Read straight from the backend's files rather than asked of a running
//! Garrison, so it works while Garrison is stopped:
//!
//! - `<state>/local/sandboxes/<name>/handle.json`: a [`sandbox::Handle`]
//!   whose `image` is the id the sandbox started from;
//! - `<snapshot dir>/local/*.json`: a [`sandbox::SnapshotRef`] whose
//!   `base_image` is the id the snapshot sits on.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use sandbox::{Handle, LABEL_SESSION_ID, SnapshotRef, format};

/// Image id → who uses it.
#[derive(Debug, Default, Clone)]
pub struct ImageUsers {
    by_id: BTreeMap<String, Vec<String>>,
}

impl ImageUsers {
    /// Scans the local backend's sandboxes under `state_dir` and its
    /// snapshots under `snapshot_dir`. Missing directories mean no users; a
    /// file that cannot be read is logged and skipped; one a newer Garrison
    /// wrote fails the scan, since the image it uses cannot be known.
    pub fn scan(state_dir: &Path, snapshot_dir: &Path) -> anyhow::Result<Self> {
        let mut users = Self::default();
        for path in files(&state_dir.join("local/sandboxes"), |dir| {
            dir.join("handle.json")
        }) {
            if let Some(handle) = read::<Handle>(&path, format::SANDBOX_HANDLE)?
                && let Some(image) = handle.image
            {
                let session = handle
                    .labels
                    .get(LABEL_SESSION_ID)
                    .map(|s| format!(" (session {s})"))
                    .unwrap_or_default();
                users.add(image, format!("sandbox {}{session}", handle.name));
            }
        }
        for path in files(&snapshot_dir.join("local"), |path| path.to_owned()) {
            if path.extension().is_some_and(|e| e == "json")
                && let Some(snapshot) = read::<SnapshotRef>(&path, format::SNAPSHOT_MANIFEST)?
                && let Some(image) = snapshot.base_image
            {
                users.add(image, format!("snapshot {}", snapshot.id));
            }
        }
        Ok(users)
    }

    /// Records that `who` uses image `id`.
    pub fn add(&mut self, id: String, who: String) {
        self.by_id.entry(id).or_default().push(who);
    }

    /// Who uses image `id` (empty when nobody does).
    pub fn users(&self, id: &str) -> &[String] {
        self.by_id.get(id).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether anybody uses image `id`.
    pub fn in_use(&self, id: &str) -> bool {
        !self.users(id).is_empty()
    }
}

/// `map(entry)` for every entry of `dir`, sorted; nothing if it is missing.
fn files(dir: &Path, map: impl Fn(&Path) -> std::path::PathBuf) -> Vec<std::path::PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<_> = entries.flatten().map(|e| map(&e.path())).collect();
    paths.sort();
    paths
}

fn read<T: serde::de::DeserializeOwned>(
    path: &Path,
    record: format::Record,
) -> Result<Option<T>, format::NewerFormat> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            tracing::warn!("reading {}: {err}", path.display());
            return Ok(None);
        }
    };
    record.check(path, &bytes)?;
    Ok(serde_json::from_slice(&bytes)
        .inspect_err(|err| tracing::warn!("parsing {}: {err}", path.display()))
        .ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sandboxes_and_snapshots() {
        let state = tempfile::tempdir().unwrap();
        let snapshots = state.path().join("snapshots");
        let sandbox = state.path().join("local/sandboxes/garrison-x");
        fs::create_dir_all(&sandbox).unwrap();
        let handle = Handle {
            backend: "local".into(),
            id: "x".into(),
            name: "garrison-x".into(),
            labels: sandbox::session_labels("devin-1", "outpost-1"),
            workdir: "/w".into(),
            state_dir: "/s".into(),
            bin_dir: "/b".into(),
            home: "/h".into(),
            image: Some("sha256-aa".into()),
        };
        fs::write(
            sandbox.join("handle.json"),
            serde_json::to_vec(&handle).unwrap(),
        )
        .unwrap();
        fs::create_dir_all(snapshots.join("local")).unwrap();
        let snapshot = SnapshotRef {
            backend: "local".into(),
            id: "snap-1".into(),
            size_bytes: 1,
            created_at_ms: 0,
            base_image: Some("sha256-bb".into()),
            sha256: None,
            lineage: None,
        };
        fs::write(
            snapshots.join("local/snap-1.json"),
            serde_json::to_vec(&snapshot).unwrap(),
        )
        .unwrap();
        fs::write(snapshots.join("local/garbage.json"), b"{").unwrap();

        let users = ImageUsers::scan(state.path(), &snapshots).unwrap();
        assert_eq!(
            users.users("sha256-aa"),
            ["sandbox garrison-x (session devin-1)"]
        );
        assert_eq!(users.users("sha256-bb"), ["snapshot snap-1"]);
        assert!(!users.in_use("sha256-cc"));
        assert!(
            !ImageUsers::scan(&state.path().join("none"), &snapshots)
                .unwrap()
                .in_use("sha256-aa")
        );
    }

    #[test]
    fn a_record_a_newer_garrison_wrote_fails_the_scan_untouched() {
        let state = tempfile::tempdir().unwrap();
        let snapshots = state.path().join("snapshots");
        let sandbox = state.path().join("local/sandboxes/garrison-x");
        fs::create_dir_all(&sandbox).unwrap();
        fs::create_dir_all(snapshots.join("local")).unwrap();
        let newer = br#"{"format":999,"backend":"local","id":"x"}"#;
        for path in [
            sandbox.join("handle.json"),
            snapshots.join("local/snap-1.json"),
        ] {
            fs::write(&path, newer).unwrap();
            let message = ImageUsers::scan(state.path(), &snapshots)
                .unwrap_err()
                .to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("a newer Garrison wrote it"), "{message}");
            assert_eq!(fs::read(&path).unwrap(), newer);
            fs::remove_file(&path).unwrap();
        }
    }
}
