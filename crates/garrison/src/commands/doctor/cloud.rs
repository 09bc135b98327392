//! The cloud backends' checks: the credentials are found and the
//! provider's API accepts them, by listing sandboxes (which changes
//! nothing) the way `garrison serve` does at start.

use std::path::Path;
use std::time::Duration;

use orchestrator::settings::ServeConfig;
use sandbox::plugin::{BackendPlugin, Placement};

use super::check::Check;

/// Bounds the listing (the backends retry transient failures).
const LIST_GUARD: Duration = Duration::from_secs(45);

/// Checks for a cloud `backend` with the resolved settings.
pub async fn checks(backend: &dyn BackendPlugin, config: Option<&ServeConfig>) -> Vec<Check> {
    let name = format!("{} API", backend.name());
    let remedy = backend.setup_hint();
    let Some(config) = config else {
        return vec![Check::info(name, "not checked: fix the settings first")];
    };
    // The backends keep caches under the state directory; a doctor writes
    // nothing there, so they get a scratch one.
    let scratch = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            return vec![Check::fail(
                name,
                format!("a scratch directory: {e}"),
                "check $TMPDIR",
            )];
        }
    };
    let Some(configured) = config.backends.get(backend.name()) else {
        return vec![Check::info(name, "not checked: no outpost uses it")];
    };
    let placement = Placement::new(scratch.path(), scratch.path(), Path::new("/nonexistent"));
    let backend = match configured.build(&placement) {
        Ok(backend) => backend,
        Err(e) => return vec![Check::fail(name, format!("{e:#}"), remedy)],
    };
    match tokio::time::timeout(LIST_GUARD, backend.list()).await {
        Ok(Ok(sandboxes)) => vec![Check::pass(
            name,
            format!(
                "credentials accepted; {} Garrison sandbox{} listed",
                sandboxes.len(),
                if sandboxes.len() == 1 { "" } else { "es" }
            ),
        )],
        Ok(Err(e)) => vec![Check::fail(name, e.to_string(), remedy)],
        Err(_) => vec![Check::fail(
            name,
            format!("no answer within {LIST_GUARD:?}"),
            "check the API URL and this machine's route to it",
        )],
    }
}
