//! The cloud backends' checks: the credentials are found and the
//! provider's API accepts them, by listing sandboxes (which changes
//! nothing) the way `garrison serve` does at start.

use std::path::Path;
use std::time::Duration;

use orchestrator::settings::ServeConfig;
use sandbox::plugin::{ApiFailure as Failure, BackendPlugin, Placement};

use super::check::Check;

/// Bounds the listing (the backends retry transient failures).
const LIST_GUARD: Duration = Duration::from_secs(45);

/// Checks for a cloud `backend` with the resolved settings.
pub(super) async fn checks(
    backend: &dyn BackendPlugin,
    config: Option<&ServeConfig>,
) -> Vec<Check> {
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
        Ok(Err(e)) => vec![Check::fail(name, e.to_string(), remedy_for(&e, remedy))],
        Err(_) => vec![Check::fail(
            name,
            format!("no answer within {} s", LIST_GUARD.as_secs()),
            UNREACHABLE,
        )],
    }
}

/// What to do when the provider's API could not be reached: its
/// credentials were never looked at, so they are not what to change.
const UNREACHABLE: &str = "the endpoint did not answer: check the backend's API URL setting \
     and this machine's route to it (network, proxy, firewall); the credentials were not checked";

/// The remedy that fits how listing failed: the credentials' setup hint
/// only when the provider refused them; the route when nothing answered.
fn remedy_for(error: &sandbox::SandboxError, setup_hint: &str) -> String {
    match classify(error) {
        Failure::Unreachable => UNREACHABLE.to_owned(),
        Failure::Refused => setup_hint.to_owned(),
        Failure::Other => format!(
            "the API answered with an error (above); check the backend's API URL, \
             and its credentials: {setup_hint}"
        ),
    }
}

/// How listing failed: a transient failure never reached the provider's
/// verdict on the credentials; a fatal one is classified by the backend
/// whose API error it is.
fn classify(error: &sandbox::SandboxError) -> Failure {
    use sandbox::SandboxError;
    let inner = match error {
        // Transient failures are those with no answer from the API, or an
        // answer that says "later": none is about the credentials.
        SandboxError::Transient(_) => return Failure::Unreachable,
        SandboxError::Fatal(e) => e,
        _ => return Failure::Other,
    };
    crate::backends::ALL
        .iter()
        .find_map(|b| b.api_failure(inner))
        .unwrap_or(Failure::Other)
}

#[cfg(test)]
mod tests {
    use anyhow::anyhow;
    use sandbox::SandboxError;

    use super::*;

    #[test]
    fn an_unreachable_endpoint_is_not_a_missing_key() {
        let hint = "set TENSORLAKE_API_KEY";
        let down = SandboxError::Transient(anyhow!("connection refused"));
        assert_eq!(classify(&down), Failure::Unreachable);
        assert!(!remedy_for(&down, hint).contains("TENSORLAKE_API_KEY"));

        // Each backend classifies its own API's errors (the Tensorlake
        // client's typed ones are tested in its crate).
        let refused = SandboxError::Fatal(anyhow!("listing: Modal said Unauthenticated: no"));
        assert_eq!(classify(&refused), Failure::Refused);
        assert_eq!(remedy_for(&refused, hint), hint);
        let down = SandboxError::Fatal(anyhow!("listing: Modal said Unavailable: later"));
        assert_eq!(classify(&down), Failure::Unreachable);
        let other = SandboxError::Fatal(anyhow!("unexpected answer"));
        assert_eq!(classify(&other), Failure::Other);
        assert!(remedy_for(&other, hint).contains(hint));
    }
}
