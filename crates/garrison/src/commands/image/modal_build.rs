//! `garrison image build NAME --backend modal`: the session image built by
//! Modal from the local backend's recipe format (see `modal::image`).

use std::path::Path;
use std::time::Instant;

use sandbox::Recipe;

pub async fn build(name: &str, recipe: Option<&Path>, state_dir: &Path) -> anyhow::Result<()> {
    let recipe = match recipe {
        Some(path) => Recipe::load(path)?,
        None => Recipe::default_recipe(),
    };
    let host = orchestrator::settings::HostEnv::current();
    let no_file = std::collections::BTreeMap::new();
    let env =
        modal::settings::resolve(&orchestrator::settings::BackendSource::new(&host, &no_file))?;
    let client = modal::Client::new(&modal::ClientConfig {
        api_url: env.api_url,
        credentials: env.credentials,
        retry: modal::RetryPolicy::default(),
    })?;
    let started = Instant::now();
    let cache = modal::image::ImageCache::path(state_dir);
    let built = modal::image::build(&client, name, &recipe, &cache, |line| {
        println!("  {line}");
    })
    .await?;
    println!(
        "{} {name} on Modal: {} ({:.1}s); serve with --backend modal",
        if built.reused { "reused" } else { "built" },
        built.image_id,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
