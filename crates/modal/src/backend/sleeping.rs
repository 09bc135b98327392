//! The records of sessions that sleep in a Modal memory snapshot, one JSON
//! file per sandbox name under the backend's state directory
//! (`<state>/modal/memory/<sandbox name>.json`, mode 0600).
//!
//! A memory snapshot ends its sandbox, and a restore makes a new one (a new
//! id and task), so Modal itself lists nothing for a sleeping session and
//! the orchestrator's handle names a sandbox that has ended. The record
//! keeps what is needed in between: the snapshot to restore, the handle the
//! orchestrator knows (listed while the session sleeps), the tags to put on
//! the restored sandbox, and, once restored, the id of the sandbox the
//! handle now means. A file in the state directory outlives a Garrison
//! restart, which in-memory state would not; Modal's own tags would not
//! do either, since an ended sandbox is not listed.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use sandbox::{Handle, format};
use serde::{Deserialize, Serialize};

/// Largest record read back (a handle and its tags).
const MAX_RECORD_BYTES: u64 = 1024 * 1024;

/// A session sleeping in, or resumed from, a memory snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct Sleeping {
    /// The memory snapshot (`TaskSnapshotMemory`'s answer).
    pub snapshot_id: String,
    /// The handle the orchestrator suspended.
    pub handle: Handle,
    /// The snapshotted sandbox's tags (labels and root), for the restored one.
    pub tags: BTreeMap<String, String>,
    /// The sandbox the snapshot was restored into, once it was.
    pub restored: Option<String>,
}

/// The record file of sandbox `name` in `dir`; `None` for a name that is not
/// a plain file name (names come back from Modal's listing too).
pub(super) fn record_path(dir: &Path, name: &str) -> Option<PathBuf> {
    let plain = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    plain.then(|| dir.join(format!("{name}.json")))
}

/// The record of sandbox `name`, if there is one.
pub(super) fn load(dir: &Path, name: &str) -> anyhow::Result<Option<Sleeping>> {
    let Some(path) = record_path(dir, name) else {
        return Ok(None);
    };
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!(e).context(format!("reading {}", path.display()))),
    };
    parse(file, &path).map(Some)
}

fn parse(file: std::fs::File, path: &Path) -> anyhow::Result<Sleeping> {
    use std::io::Read;
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        bail!(
            "{} is too large to be a memory snapshot record",
            path.display()
        );
    }
    format::MODAL_MEMORY.check(path, &bytes)?;
    serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))
}

/// Every record in `dir` (none when it does not exist); unreadable ones are
/// skipped with a warning, so one bad file does not hide the others. One a
/// newer Garrison wrote fails the listing: its session cannot be told.
pub(super) fn load_all(dir: &Path) -> anyhow::Result<Vec<Sleeping>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        match std::fs::File::open(&path)
            .map_err(anyhow::Error::from)
            .and_then(|f| parse(f, &path))
        {
            Ok(record) => found.push(record),
            Err(e) if e.is::<format::NewerFormat>() => return Err(e),
            Err(e) => tracing::warn!(error = %e, "skipping a memory snapshot record"),
        }
    }
    Ok(found)
}

/// Writes the record of its handle's sandbox name atomically, mode 0600.
pub(super) fn save(dir: &Path, record: &Sleeping) -> anyhow::Result<()> {
    let path = record_path(dir, &record.handle.name)
        .with_context(|| format!("not a sandbox name: {:?}", record.handle.name))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".record.{:016x}.tmp", rand::random::<u64>()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&format::MODAL_MEMORY.to_vec_pretty(record)?)?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.with_context(|| format!("writing {}", path.display()))
}

/// Removes the record of sandbox `name`, if any.
pub(super) fn remove(dir: &Path, name: &str) -> anyhow::Result<()> {
    let Some(path) = record_path(dir, name) else {
        return Ok(());
    };
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!(e).context(format!("removing {}", path.display()))),
    }
}

/// The handles `list` adds for sleeping sessions: those not restored yet
/// and not among the sandboxes Modal listed (by name).
pub(super) fn sleeping_handles(records: Vec<Sleeping>, listed: &[Handle]) -> Vec<Handle> {
    records
        .into_iter()
        .filter(|r| r.restored.is_none())
        .filter(|r| !listed.iter().any(|h| h.name == r.handle.name))
        .map(|r| r.handle)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(name: &str) -> Handle {
        Handle {
            backend: "modal".into(),
            id: format!("sb-{name}"),
            name: name.into(),
            labels: BTreeMap::new(),
            workdir: "/g/workspace".into(),
            state_dir: "/g/state".into(),
            bin_dir: "/g/bin".into(),
            home: "/g/home".into(),
            image: None,
        }
    }

    fn record(name: &str, restored: Option<&str>) -> Sleeping {
        Sleeping {
            snapshot_id: "sn-1".into(),
            handle: handle(name),
            tags: BTreeMap::from([("garrison.root".into(), "/g".into())]),
            restored: restored.map(str::to_owned),
        }
    }

    #[test]
    fn only_plain_sandbox_names_make_record_paths() {
        let dir = Path::new("/state/modal/memory");
        assert_eq!(
            record_path(dir, "garrison-ab12").unwrap(),
            dir.join("garrison-ab12.json")
        );
        for bad in ["", ".hidden", "a/b", "../x", "a b", &"x".repeat(129)] {
            assert!(record_path(dir, bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_record_round_trips_privately_and_is_removed() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("memory");
        assert_eq!(load(&dir, "garrison-a").unwrap(), None);
        let written = record("garrison-a", Some("sb-new"));
        save(&dir, &written).unwrap();
        assert_eq!(load(&dir, "garrison-a").unwrap(), Some(written.clone()));
        let mode = std::fs::metadata(dir.join("garrison-a.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_all(&dir).unwrap(), vec![written]);
        remove(&dir, "garrison-a").unwrap();
        remove(&dir, "garrison-a").unwrap();
        assert_eq!(load(&dir, "garrison-a").unwrap(), None);
    }

    #[test]
    fn a_broken_record_is_an_error_and_is_skipped_in_the_listing() {
        let tmp = tempfile::tempdir().unwrap();
        save(tmp.path(), &record("garrison-good", None)).unwrap();
        std::fs::write(tmp.path().join("garrison-bad.json"), b"{not json").unwrap();
        assert!(load(tmp.path(), "garrison-bad").is_err());
        let all = load_all(tmp.path()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].handle.name, "garrison-good");
    }

    #[test]
    fn records_without_a_format_read_and_newer_ones_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let written = record("garrison-a", None);
        let path = tmp.path().join("garrison-a.json");
        // As releases before formats wrote it.
        std::fs::write(&path, serde_json::to_vec_pretty(&written).unwrap()).unwrap();
        assert_eq!(
            load(tmp.path(), "garrison-a").unwrap(),
            Some(written.clone())
        );
        assert_eq!(load_all(tmp.path()).unwrap(), vec![written.clone()]);

        let mut newer = serde_json::to_value(&written).unwrap();
        newer["format"] = 999.into();
        let newer = serde_json::to_vec(&newer).unwrap();
        std::fs::write(&path, &newer).unwrap();
        for err in [
            load(tmp.path(), "garrison-a").unwrap_err(),
            load_all(tmp.path()).unwrap_err(),
        ] {
            let message = format!("{err:#}");
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("a newer Garrison wrote it"), "{message}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), newer);
    }

    #[test]
    fn list_adds_sessions_that_sleep_and_are_not_listed_already() {
        let records = vec![
            record("garrison-sleeping", None),
            record("garrison-restored", Some("sb-2")),
            record("garrison-listed", None),
        ];
        let listed = vec![handle("garrison-listed")];
        let added = sleeping_handles(records, &listed);
        assert_eq!(added, vec![handle("garrison-sleeping")]);
    }
}
