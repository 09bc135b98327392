//! The registered sandbox images, as the mock's state keeps them: by name,
//! with the answers already given per idempotency key. `catalog` serves
//! them over HTTP.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// One registered image.
#[derive(Clone, Debug)]
pub(crate) struct CatalogImage {
    pub id: String,
    pub name: String,
    pub snapshot_id: String,
    pub public: bool,
    /// The image's own copy of the snapshot archive.
    pub archive: PathBuf,
    pub size: u64,
    pub created_at: String,
    pub updated_at: String,
}

impl CatalogImage {
    /// The CAS image registry's record.
    pub(crate) fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "name": self.name,
            "snapshot_id": self.snapshot_id,
            "global": self.public,
            "physical_size_bytes": self.size,
            "logical_size_bytes": self.size,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        })
    }
}

/// The registered images, by name, and the answers given per
/// idempotency key.
#[derive(Default)]
pub(crate) struct Catalog {
    pub by_name: BTreeMap<String, CatalogImage>,
    pub(super) answered: HashMap<String, (String, String)>,
}

impl Catalog {
    /// The image `reference` names: a name (as the registry stores it,
    /// lowercase) or an `image_` id.
    pub(crate) fn resolve(&self, reference: &str) -> Option<&CatalogImage> {
        self.by_name
            .get(&reference.to_ascii_lowercase())
            .or_else(|| self.by_name.values().find(|i| i.id == reference))
    }
}
