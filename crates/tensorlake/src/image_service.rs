//! `garrison image build|ls|rm --backend tensorlake`: session images in
//! Tensorlake's sandbox-image catalog, built from the local backend's
//! recipe format in a builder sandbox (see [`crate::image_build`]), as the
//! plug-in's [`ImageService`].

use std::time::Instant;

use anyhow::{Context, bail};
use async_trait::async_trait;
use common::settings::SettingsSource;
use sandbox::plugin::images::{CatalogEntry, CatalogListing, ImageBuild, ImageService};

use crate::catalog::ImageCatalog;
use crate::image_build::{BuildRequest, DEFAULT_STEP_PATH, build_image};
use crate::{TensorlakeBackend, TensorlakeConfig, TensorlakeSettings};

/// Overrides `PATH` for the build steps (wrappers put first, or a mock
/// Tensorlake whose sandboxes run on this machine).
const STEP_PATH_ENV: &str = "TENSORLAKE_BUILD_PATH";

/// The Tensorlake plug-in's images.
pub(crate) static IMAGES: Images = Images;

/// Images in Tensorlake's catalog.
pub(crate) struct Images;

fn catalog(settings: &TensorlakeSettings) -> anyhow::Result<ImageCatalog> {
    let client = crate::Client::new(&settings.api_url, settings.api_key.clone())?;
    Ok(ImageCatalog::new(&client))
}

#[async_trait]
impl ImageService for Images {
    async fn build(
        &self,
        settings: &(dyn SettingsSource + Sync),
        build: ImageBuild,
        progress: &mut (dyn for<'l> FnMut(&'l str) + Send),
    ) -> anyhow::Result<String> {
        let ImageBuild {
            name,
            recipe,
            base,
            state_dir,
        } = build;
        if base.as_deref().is_some_and(|b| b.trim().is_empty()) {
            bail!("--base is empty: name a Tensorlake image, or leave it out for the default");
        }
        let settings = crate::settings::resolve(settings)?;
        let step_path =
            std::env::var(STEP_PATH_ENV).unwrap_or_else(|_| DEFAULT_STEP_PATH.to_owned());
        let backend = TensorlakeBackend::new(TensorlakeConfig {
            api_url: settings.api_url.clone(),
            sandbox_api_url: settings.sandbox_api_url.clone(),
            api_key: settings.api_key.clone(),
            default_image: None,
            timeout_secs: settings.timeout_secs,
            sandbox_root: settings.sandbox_root.clone(),
            state_dir: state_dir.join("tensorlake"),
            retry: Default::default(),
        })
        .context("setting up the Tensorlake backend")?;
        let catalog = catalog(&settings)?;
        let started = Instant::now();
        let request = BuildRequest {
            name: name.clone(),
            recipe,
            base_image: base,
            step_path,
            resources: Default::default(),
        };
        // Listening from here on: an interrupt while the builder is being
        // created still deletes it once it exists.
        let mut interrupt =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .context("listening for an interrupt")?;
        let image = build_image(&backend, &catalog, &request, progress, async move {
            interrupt.recv().await;
        })
        .await
        .with_context(|| format!("building {name} on Tensorlake"))?;
        Ok(format!(
            "built {name} on Tensorlake: {} (snapshot {}, {:.1}s); serve with \
             TENSORLAKE_IMAGE={name} --backend tensorlake",
            image.id,
            image.snapshot_id,
            started.elapsed().as_secs_f64()
        ))
    }

    fn has_catalog(&self) -> bool {
        true
    }

    async fn list(&self, settings: &(dyn SettingsSource + Sync)) -> anyhow::Result<CatalogListing> {
        let settings = crate::settings::resolve(settings)?;
        let images = catalog(&settings)?.list().await?;
        let entries = images
            .iter()
            .map(|image| CatalogEntry {
                name: image.name.clone(),
                id: image.id.clone(),
                size_bytes: image.logical_size_bytes.max(image.physical_size_bytes),
                created_at: image.created_at.clone(),
            })
            .collect();
        Ok(CatalogListing {
            entries,
            json: serde_json::to_string_pretty(&images)?,
        })
    }

    async fn remove(
        &self,
        settings: &(dyn SettingsSource + Sync),
        name: &str,
    ) -> anyhow::Result<String> {
        let settings = crate::settings::resolve(settings)?;
        if !catalog(&settings)?.delete(name).await? {
            bail!("Tensorlake's catalog has no image {name}");
        }
        Ok(format!("removed {name} from Tensorlake"))
    }
}
