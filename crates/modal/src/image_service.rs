//! `garrison image build NAME --backend modal`: the session image built by
//! Modal from the local backend's recipe format (see [`crate::image`]), as
//! the plug-in's [`ImageService`].

use std::time::Instant;

use async_trait::async_trait;
use common::settings::SettingsSource;
use sandbox::plugin::images::{ImageBuild, ImageService};

/// The Modal plug-in's images.
pub(crate) static IMAGES: Images = Images;

/// Images built by Modal's image builder, their ids cached by name.
pub(crate) struct Images;

#[async_trait]
impl ImageService for Images {
    async fn build(
        &self,
        settings: &(dyn SettingsSource + Sync),
        build: ImageBuild,
        progress: &mut (dyn for<'l> FnMut(&'l str) + Send),
    ) -> anyhow::Result<String> {
        // `--base` is Tensorlake's: Modal builds from the recipe's suite.
        let ImageBuild {
            name,
            recipe,
            state_dir,
            ..
        } = build;
        let env = crate::settings::resolve(settings)?;
        let client = crate::Client::new(&crate::ClientConfig {
            api_url: env.api_url,
            credentials: env.credentials,
            retry: crate::RetryPolicy::default(),
        })?;
        let started = Instant::now();
        let cache = crate::image::ImageCache::path(&state_dir);
        let built =
            crate::image::build(&client, &name, &recipe, &cache, |line| progress(line)).await?;
        Ok(format!(
            "{} {name} on Modal: {} ({:.1}s); serve with --backend modal",
            if built.reused { "reused" } else { "built" },
            built.image_id,
            started.elapsed().as_secs_f64()
        ))
    }
}
