//! `garrison image build|ls|rm --backend <backend>` for a backend other
//! than `local`: the plug-in's [`ImageService`] does the work, with the
//! backend's settings from the environment alone; this prints.

use std::collections::BTreeMap;
use std::path::Path;

use ::local::images::Recipe;
use anyhow::Context;
use orchestrator::settings::{BackendSource, HostEnv};
use sandbox::plugin::images::{ImageBuild, ImageService};

use super::table::catalog_table;

/// The image service of the backend called `backend`.
fn service(backend: &str) -> anyhow::Result<&'static dyn ImageService> {
    crate::backends::find(backend)
        .and_then(|b| b.images())
        .with_context(|| format!("the {backend} backend builds no images"))
}

/// Builds `name` from `recipe` (else the default one) on `backend`.
pub(super) async fn build(
    backend: &str,
    name: &str,
    recipe: Option<&Path>,
    base: Option<&str>,
    state_dir: &Path,
) -> anyhow::Result<()> {
    let recipe = match recipe {
        Some(arg) => Recipe::file_or_builtin(arg)?,
        None => Recipe::default_recipe(),
    };
    let service = service(backend)?;
    let host = HostEnv::current();
    let no_file = BTreeMap::new();
    let settings = BackendSource::new(&host, &no_file);
    let build = ImageBuild {
        name: name.to_owned(),
        recipe,
        base: base.map(str::to_owned),
        state_dir: state_dir.to_owned(),
    };
    let built = service
        .build(&settings, build, &mut |line: &str| println!("  {line}"))
        .await?;
    println!("{built}");
    Ok(())
}

/// Lists `backend`'s catalog.
pub(super) async fn list(backend: &str, json: bool) -> anyhow::Result<()> {
    let service = service(backend)?;
    let host = HostEnv::current();
    let no_file = BTreeMap::new();
    let listing = service.list(&BackendSource::new(&host, &no_file)).await?;
    if json {
        crate::output::println(&listing.json)?;
    } else {
        crate::output::print(&catalog_table(&listing.entries))?;
    }
    Ok(())
}

/// Removes `name` from `backend`'s catalog.
pub(super) async fn remove(backend: &str, name: &str) -> anyhow::Result<()> {
    let service = service(backend)?;
    let host = HostEnv::current();
    let no_file = BTreeMap::new();
    let removed = service
        .remove(&BackendSource::new(&host, &no_file), name)
        .await?;
    println!("{removed}");
    Ok(())
}
