//! What `serve` checks once at start, because retrying cannot fix it: the
//! state directory can be written, and the fleet API accepts the token and
//! knows each outpost. A failure is a [`Misconfigured`] error, which
//! `garrison` turns into exit code 78 (EX_CONFIG) and the systemd unit
//! does not restart on. An API that does not answer at all (refused, DNS,
//! TLS, timeout, 5xx) may come back: `serve` starts anyway, says why, and
//! keeps trying in the background.

use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use fleet::{FleetClient, ListQuery};
use tracing::{info, warn};

use crate::queue::refusal;

/// A configuration error: only an operator can fix it (a refused token,
/// an unknown outpost, a state directory this user cannot write). The
/// message says what happened and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Misconfigured(pub String);

/// How long the start waits for the fleet API's answers before serving
/// anyway: sessions left running by the last start are not supervised
/// until serving begins.
pub(super) const API_CHECK_LIMIT: Duration = Duration::from_secs(20);

/// Lists one entry of each outpost's queue, the call `serve` makes first
/// and the one the machine scope allows, then reads the outpost itself
/// when the token has the orchestrator scope (see [`known_outpost`]). The
/// first refusal (401, 403 on the queue, 404) is the error; the first outpost the API does
/// not answer for ends the check, since the others would wait the same
/// way, and so does running out of `limit`.
pub(super) async fn check_api(
    client: &FleetClient,
    outposts: &[&str],
    limit: Duration,
) -> Result<(), Misconfigured> {
    match tokio::time::timeout(limit, check_each(client, outposts)).await {
        Ok(checked) => checked,
        Err(_) => {
            warn!(
                api_url = client.api_url(),
                limit_secs = limit.as_secs(),
                "the fleet API did not answer in time; serving anyway and retrying (not ready until it answers)"
            );
            Ok(())
        }
    }
}

async fn check_each(client: &FleetClient, outposts: &[&str]) -> Result<(), Misconfigured> {
    for &id in outposts {
        match client.list_page(&ListQuery::new(id).first(1)).await {
            Ok(page) => known_outpost(client, id, page.items.is_empty()).await?,
            Err(e) => {
                if let Some(advice) = refusal::advice(id, client.api_url(), &e) {
                    return Err(Misconfigured(advice));
                }
                if e.is_transient() {
                    warn!(
                        outpost = id,
                        api_url = client.api_url(),
                        error = %e,
                        "the fleet API does not answer; serving anyway and retrying (not ready until it answers)"
                    );
                    return Ok(());
                }
                warn!(
                    outpost = id,
                    error = %e,
                    "checking the outpost's queue at start failed; serving anyway"
                );
            }
        }
    }
    Ok(())
}

/// After the queue answered: does the outpost exist? The queue cannot say
/// (`outpost` is only a filter, so an unknown one lists empty, as an idle
/// one does), and reading the outpost needs the orchestrator scope
/// (Devin's reference: "Create, get, and delete require the orchestrator
/// scope"). So the outpost is read when the token may: 404 is a
/// configuration error; 403 leaves a warning when the queue was empty.
async fn known_outpost(client: &FleetClient, id: &str, empty: bool) -> Result<(), Misconfigured> {
    match client.get_outpost(id).await {
        Ok(Some(_)) => info!(
            outpost = id,
            "the fleet API accepts the token and knows the outpost"
        ),
        Ok(None) => {
            return Err(Misconfigured(format!(
                "outpost {id} does not exist at the fleet API {} (404 reading the outpost): \
                 check --outpost (OUTPOST_ID, or the [[outpost]] tables of the config file) \
                 against `garrison outposts list`, or create it with `garrison outposts \
                 create NAME`; check --api-url (DEVIN_API_URL) too",
                client.api_url()
            )));
        }
        Err(fleet::FleetError::Forbidden { .. }) if empty => warn!(
            outpost = id,
            "the token reads the outpost's queue, which is empty, but may not read the outpost \
             itself (no account.outposts.orchestrator scope, which serving does not need): an \
             unknown outpost looks the same as an idle one, so check the id against Devin's \
             Settings -> Environment -> Outposts"
        ),
        Err(fleet::FleetError::Forbidden { .. }) => info!(
            outpost = id,
            "the fleet API accepts the token and the outpost's queue has entries"
        ),
        Err(e) => warn!(
            outpost = id,
            error = %e,
            "reading the outpost at start failed; serving anyway"
        ),
    }
    Ok(())
}

/// Creates the state directory if needed and proves this user can write
/// in it, so the failure names the directory and the user rather than
/// surfacing as SQLite's "unable to open database file" (error code 14).
pub(super) fn writable_state_dir(dir: &Path) -> Result<(), Misconfigured> {
    let fail = |verb: &str, e: &std::io::Error| {
        Misconfigured(format!(
            "cannot {verb} {}: {} (garrison runs as {}); make it writable by that user \
             (chown or chmod), or choose another state directory with --state-dir \
             (GARRISON_HOME)",
            dir.display(),
            io_reason(e),
            current_user()
        ))
    };
    std::fs::create_dir_all(dir).map_err(|e| fail("create", &e))?;
    let probe = dir.join(format!(".garrison-write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(|e| fail("write", &e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The I/O error in words, without Rust's "(os error N)".
pub(super) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        ErrorKind::PermissionDenied => "permission denied".to_owned(),
        ErrorKind::ReadOnlyFilesystem => "read-only file system".to_owned(),
        ErrorKind::StorageFull => "no space left on the device".to_owned(),
        ErrorKind::NotADirectory => "a part of the path is not a directory".to_owned(),
        _ => e.to_string(),
    }
}

/// `name (uid N)`, or `uid N` when the user has no name.
fn current_user() -> String {
    let uid = nix::unistd::geteuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => format!("user {} (uid {uid})", user.name),
        _ => format!("uid {uid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use emulator::{Emulator, EmulatorConfig};
    use fleet::{ClientOptions, Platform, RetryPolicy, Secret};

    fn client(api_url: &str, token: &str) -> FleetClient {
        let options = ClientOptions {
            retry: RetryPolicy::none(),
            ..ClientOptions::default()
        };
        FleetClient::new(api_url, Secret::new(token), options).unwrap()
    }

    #[tokio::test]
    async fn the_api_check_refuses_what_retrying_cannot_fix_and_nothing_else() {
        let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
        let known = emu.create_outpost("lab", Platform::Linux);
        let limit = Duration::from_secs(60);
        let good = client(&emu.base_url(), &emu.account_token());
        check_api(&good, &[&known], limit).await.unwrap();

        let unknown = "outpost_env-000000000000";
        let err = check_api(&good, &[&known, unknown], limit)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(unknown) && err.contains("(404"), "{err}");
        assert!(err.contains(&emu.base_url()), "{err}");

        // A machine-scoped token may not read outposts, and an unknown
        // outpost's queue lists empty (`outpost` is a filter, per Devin's
        // reference): it cannot be told from an idle one, so it is not
        // refused (a warning says so).
        let machine = client(&emu.base_url(), &emu.mint_token(&[emulator::SCOPE_MACHINE]));
        check_api(&machine, &[&known, unknown], limit)
            .await
            .unwrap();

        let wrong = client(&emu.base_url(), "cog_wrong");
        let err = check_api(&wrong, &[&known], limit).await.unwrap_err();
        assert!(err.to_string().contains("(401)"), "{err}");

        // Nothing listens: a passing failure, not a configuration error.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let nobody = client(&format!("http://127.0.0.1:{port}"), "cog_x");
        check_api(&nobody, &[unknown], limit).await.unwrap();
        // Nor is an API that never answers: the limit ends the wait.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hung = client(&format!("http://{}", silent.local_addr().unwrap()), "cog_x");
        check_api(&hung, &[unknown], Duration::from_millis(200))
            .await
            .unwrap();
    }

    #[test]
    fn a_state_directory_is_created_and_probed_without_leaving_a_trace() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a").join("state");
        writable_state_dir(&state).unwrap();
        assert!(state.is_dir());
        assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
    }

    #[test]
    fn a_path_through_a_file_names_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let state = file.join("state");
        let err = writable_state_dir(&state).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cannot create {}: ", state.display())),
            "{err}"
        );
        assert!(err.contains("--state-dir") && err.contains("uid "), "{err}");
    }

    #[test]
    fn io_reasons_are_words() {
        let denied = std::io::Error::from(ErrorKind::PermissionDenied);
        assert_eq!(io_reason(&denied), "permission denied");
    }
}
