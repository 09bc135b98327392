//! The cloud backends' checks: the credentials are found and the
//! provider's API accepts them, by listing sandboxes (which changes
//! nothing) the way `garrison serve` does at start.

use std::path::Path;
use std::time::Duration;

use orchestrator::config::{BackendKind, ServeConfig};

use super::check::Check;

/// Bounds the listing (the backends retry transient failures).
const LIST_GUARD: Duration = Duration::from_secs(45);

/// Checks for `kind` (`tensorlake` or `modal`) with the resolved settings.
pub async fn checks(kind: BackendKind, config: Option<&ServeConfig>) -> Vec<Check> {
    let name = format!("{} API", kind.as_str());
    let remedy = match kind {
        BackendKind::Tensorlake => {
            "set TENSORLAKE_API_KEY (or TENSORLAKE_API_KEY_FILE, mode 0600) to a key from \
             cloud.tensorlake.ai, and TENSORLAKE_API_URL only for a non-default endpoint"
        }
        _ => {
            "set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or run `modal token new`, which writes \
             ~/.modal.toml), and MODAL_API_URL only for a non-default endpoint"
        }
    };
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
    let backend = match orchestrator::serve::make_backend(
        kind,
        scratch.path(),
        scratch.path(),
        Path::new("/nonexistent"),
        config.tensorlake.as_ref(),
        config.modal.as_ref(),
    ) {
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
