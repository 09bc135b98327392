//! The format versions of the records Garrison keeps under its state
//! directory (besides the state store, which versions its schema itself),
//! and the one rule they all follow.
//!
//! Each record is a JSON object carrying a `format` number, written on
//! every new record. A record without one was written before formats were
//! recorded and reads as format 1, which is what every existing state
//! directory holds. A record whose format is newer than this binary knows
//! was written by a newer Garrison: reading it fails with [`NewerFormat`],
//! which names the file, and the caller leaves it as it is (never rewritten
//! or deleted because it is newer), so going back to the newer release
//! finds it intact.
//!
//! Only files under the state directory are versioned this way: what other
//! programs or services read (OCI configs, the files put inside a sandbox,
//! objects in a bucket) keeps its format.
//!
//! To change a record's format, raise its `current` and keep reading every
//! older one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One kind of record under the state directory and the newest format of
/// it this binary writes and reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// What the record is, for messages ("sandbox handle").
    pub what: &'static str,
    /// The format this binary writes, and the newest it reads.
    pub current: u32,
}

/// `<state>/{host,local}/sandboxes/<name>/handle.json`: a [`crate::Handle`].
pub const SANDBOX_HANDLE: Record = Record {
    what: "sandbox handle",
    current: 1,
};

/// `<snapshot dir>/<backend>/<id>.json`: the [`crate::SnapshotRef`] beside a
/// snapshot archive.
pub const SNAPSHOT_MANIFEST: Record = Record {
    what: "snapshot manifest",
    current: 1,
};

/// `<state>/images/store/<id>/image.json`: a local image's record.
pub const LOCAL_IMAGE: Record = Record {
    what: "local image record",
    current: 1,
};

/// `<state>/local/sandboxes/<name>/net.json`: a local sandbox's network.
pub const LOCAL_NETWORK: Record = Record {
    what: "local sandbox network record",
    current: 1,
};

/// `<state>/local/sandboxes/<name>/policy.json`: the network policy last
/// applied to a local sandbox.
pub const LOCAL_POLICY: Record = Record {
    what: "local sandbox network policy record",
    current: 1,
};

/// `<state>/modal/memory/<name>.json`: a session sleeping in a Modal memory
/// snapshot.
pub const MODAL_MEMORY: Record = Record {
    what: "Modal memory snapshot record",
    current: 1,
};

/// `<state>/modal/images.json`: the Modal image ids by recipe and by name.
pub const MODAL_IMAGES: Record = Record {
    what: "Modal image cache",
    current: 1,
};

/// `<state>/tensorlake/labels/<name>.json`: this machine's copy of a
/// Tensorlake sandbox's labels.
pub const TENSORLAKE_LABELS: Record = Record {
    what: "Tensorlake labels record",
    current: 1,
};

/// A record written by a newer Garrison than this one.
#[derive(Debug, thiserror::Error)]
#[error(
    "{path} is a {what} in format {found}, newer than this garrison {version} knows (format \
     {known}): a newer Garrison wrote it. Nothing was changed; run that release (or a newer \
     one) on this state directory",
    path = path.display(),
    version = env!("CARGO_PKG_VERSION")
)]
pub struct NewerFormat {
    /// The file.
    pub path: PathBuf,
    /// What it is.
    pub what: &'static str,
    /// The format it records.
    pub found: u64,
    /// The newest format this binary knows.
    pub known: u32,
}

/// The record with its format, as written.
#[derive(Serialize)]
struct Versioned<'a, T: ?Sized> {
    format: u32,
    #[serde(flatten)]
    record: &'a T,
}

/// Just the format of a record (a missing one is format 1).
#[derive(Deserialize)]
struct Probe {
    format: Option<serde_json::Value>,
}

impl Record {
    /// `record` as JSON with this record's current `format` first.
    pub fn to_vec<T: Serialize + ?Sized>(&self, record: &T) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(&self.versioned(record))
    }

    /// [`Record::to_vec`], pretty-printed.
    pub fn to_vec_pretty<T: Serialize + ?Sized>(&self, record: &T) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec_pretty(&self.versioned(record))
    }

    fn versioned<'a, T: ?Sized>(&self, record: &'a T) -> Versioned<'a, T> {
        Versioned {
            format: self.current,
            record,
        }
    }

    /// The format `bytes` record: 1 when they record none. Bytes that are
    /// no JSON object, or a `format` that is no number, are left to the
    /// caller's own parsing to judge.
    pub fn format_of(bytes: &[u8]) -> u64 {
        serde_json::from_slice::<Probe>(bytes)
            .ok()
            .and_then(|p| p.format)
            .and_then(|f| f.as_u64())
            .unwrap_or(1)
    }

    /// Refuses `bytes` (read from `path`) when a newer Garrison wrote them;
    /// any older format (1 to `current`) passes.
    pub fn check(&self, path: &Path, bytes: &[u8]) -> Result<(), NewerFormat> {
        let found = Self::format_of(bytes);
        if found > u64::from(self.current) {
            return Err(NewerFormat {
                path: path.to_owned(),
                what: self.what,
                found,
                known: self.current,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Thing {
        name: String,
    }

    #[test]
    fn writes_the_format_first_and_reads_it_back() {
        let bytes = SANDBOX_HANDLE.to_vec(&Thing { name: "a".into() }).unwrap();
        assert_eq!(bytes, br#"{"format":1,"name":"a"}"#);
        assert_eq!(Record::format_of(&bytes), 1);
        let thing: Thing = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(thing.name, "a");
    }

    #[test]
    fn a_record_without_a_format_is_format_1() {
        let path = Path::new("/state/x.json");
        assert_eq!(Record::format_of(br#"{"name":"a"}"#), 1);
        SANDBOX_HANDLE.check(path, br#"{"name":"a"}"#).unwrap();
        SANDBOX_HANDLE.check(path, b"not json").unwrap();
    }

    #[test]
    fn a_newer_format_is_refused_naming_the_file() {
        let err = SNAPSHOT_MANIFEST
            .check(Path::new("/state/x.json"), br#"{"format":999,"name":"a"}"#)
            .unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("/state/x.json is a snapshot manifest in format 999"));
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
        assert!(message.contains("Nothing was changed"), "{message}");
    }
}
