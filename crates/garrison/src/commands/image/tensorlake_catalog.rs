//! `garrison image build|ls|rm --backend tensorlake`: session images in
//! Tensorlake's sandbox-image catalog, built from the local backend's
//! recipe format in a builder sandbox (see `tensorlake::image_build`).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use sandbox::Recipe;
use tensorlake::catalog::{CatalogImage, ImageCatalog};
use tensorlake::image_build::{BuildRequest, DEFAULT_STEP_PATH, build_image};
use tensorlake::{TensorlakeBackend, TensorlakeConfig, TensorlakeSettings};

/// Overrides `PATH` for the build steps (wrappers put first, or a mock
/// Tensorlake whose sandboxes run on this machine).
pub const STEP_PATH_ENV: &str = "TENSORLAKE_BUILD_PATH";

fn settings() -> anyhow::Result<TensorlakeSettings> {
    let host = orchestrator::settings::HostEnv::current();
    let no_file = std::collections::BTreeMap::new();
    Ok(tensorlake::settings::resolve(
        &orchestrator::settings::BackendSource::new(&host, &no_file),
    )?)
}

fn catalog(settings: &TensorlakeSettings) -> anyhow::Result<ImageCatalog> {
    let client = tensorlake::Client::new(&settings.api_url, settings.api_key.clone())?;
    Ok(ImageCatalog::new(&client))
}

pub async fn build(
    name: &str,
    recipe: Option<&Path>,
    base: Option<&str>,
    state_dir: &Path,
) -> anyhow::Result<()> {
    let recipe = match recipe {
        Some(path) => Recipe::load(path)?,
        None => Recipe::default_recipe(),
    };
    if base.is_some_and(|b| b.trim().is_empty()) {
        bail!("--base is empty: name a Tensorlake image, or leave it out for the default");
    }
    let settings = settings()?;
    let step_path = std::env::var(STEP_PATH_ENV).unwrap_or_else(|_| DEFAULT_STEP_PATH.to_owned());
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
        name: name.to_owned(),
        recipe,
        base_image: base.map(str::to_owned),
        step_path,
        resources: Default::default(),
    };
    // Listening from here on: an interrupt while the builder is being
    // created still deletes it once it exists.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("listening for an interrupt")?;
    let image = build_image(
        &backend,
        &catalog,
        &request,
        &mut |line: &str| println!("  {line}"),
        async move {
            interrupt.recv().await;
        },
    )
    .await
    .with_context(|| format!("building {name} on Tensorlake"))?;
    println!(
        "built {name} on Tensorlake: {} (snapshot {}, {:.1}s); serve with \
         TENSORLAKE_IMAGE={name} --backend tensorlake",
        image.id,
        image.snapshot_id,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub async fn list(json: bool) -> anyhow::Result<()> {
    let images = catalog(&settings()?)?.list().await?;
    if json {
        crate::output::json(&images)?;
    } else {
        crate::output::print(&table(&images))?;
    }
    Ok(())
}

pub async fn remove(name: &str) -> anyhow::Result<()> {
    if !catalog(&settings()?)?.delete(name).await? {
        bail!("Tensorlake's catalog has no image {name}");
    }
    println!("removed {name} from Tensorlake");
    Ok(())
}

/// `image ls --backend tensorlake`: NAME, ID, SIZE, CREATED, by name.
fn table(images: &[CatalogImage]) -> String {
    let mut sorted: Vec<&CatalogImage> = images.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows = vec![["NAME", "ID", "SIZE", "CREATED"].map(str::to_owned)];
    for image in sorted {
        let created = chrono::DateTime::parse_from_rfc3339(&image.created_at)
            .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_else(|_| image.created_at.clone());
        rows.push([
            image.name.clone(),
            image.id.clone(),
            super::human_size(image.logical_size_bytes.max(image.physical_size_bytes)),
            created,
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_sorts_by_name_and_lines_up() {
        let image = |name: &str, id: &str| CatalogImage {
            id: id.to_owned(),
            name: name.to_owned(),
            logical_size_bytes: 300 * 1024 * 1024,
            created_at: "2026-12-01T17:00:00.000Z".to_owned(),
            ..Default::default()
        };
        assert_eq!(
            table(&[image("zeta", "image_2"), image("alpha-long", "image_1")]),
            "NAME        ID       SIZE     CREATED\n\
             alpha-long  image_1  300 MiB  2026-12-01 17:00 UTC\n\
             zeta        image_2  300 MiB  2026-12-01 17:00 UTC\n"
        );
    }
}
