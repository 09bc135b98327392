//! The image capability of a plug-in: `garrison image build|ls|rm
//! --backend <backend>` for backends that build session images from the
//! local backend's recipe format, or keep a catalog of them.
//!
//! The CLI loads the recipe and prints; the backend reads its own settings
//! (from the environment only, as `image` always did) and does the work.

use std::path::PathBuf;

use async_trait::async_trait;
use common::settings::SettingsSource;

use crate::Recipe;

/// A build of one session image.
#[derive(Clone, Debug)]
pub struct ImageBuild {
    /// The name to give the image.
    pub name: String,
    /// What goes in it.
    pub recipe: Recipe,
    /// `--base`: the image the build starts from, where the backend has one.
    pub base: Option<String>,
    /// Garrison's state directory (image caches live under it).
    pub state_dir: PathBuf,
}

/// One image of a backend's catalog, for `image ls`'s table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    /// Its name.
    pub name: String,
    /// The backend's id for it.
    pub id: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// When it was made, as the backend spells it (RFC 3339 if it can).
    pub created_at: String,
}

/// A backend's catalog of images, listed.
#[derive(Clone, Debug)]
pub struct CatalogListing {
    /// The images, for the table.
    pub entries: Vec<CatalogEntry>,
    /// The same as an indented JSON array of the catalog's own fields,
    /// for `--json`.
    pub json: String,
}

/// Builds session images, and (optionally) lists and removes them.
/// `settings` is where the backend reads its credentials.
#[async_trait]
pub trait ImageService: Sync {
    /// Builds `build`, sending each line of the build's output to
    /// `progress`; the line that says what was built.
    async fn build(
        &self,
        settings: &(dyn SettingsSource + Sync),
        build: ImageBuild,
        progress: &mut (dyn for<'l> FnMut(&'l str) + Send),
    ) -> anyhow::Result<String>;

    /// Whether the backend has a catalog to list and remove from.
    fn has_catalog(&self) -> bool {
        false
    }

    /// Every image of the catalog.
    async fn list(
        &self,
        _settings: &(dyn SettingsSource + Sync),
    ) -> anyhow::Result<CatalogListing> {
        anyhow::bail!("this backend keeps no image catalog")
    }

    /// Removes the image `name` from the catalog; the line that says so.
    async fn remove(
        &self,
        _settings: &(dyn SettingsSource + Sync),
        _name: &str,
    ) -> anyhow::Result<String> {
        anyhow::bail!("this backend keeps no image catalog")
    }
}
