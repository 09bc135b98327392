//! The snapshot store: an object store is probed (a small object written,
//! read back and deleted, each step reported); a directory needs nothing.

use orchestrator::settings::ServeConfig;
use sandbox::snapshot_store::ObjectSnapshots;

use super::check::Check;

const REMEDY: &str = "check the URL, the endpoint (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP for http), \
                      the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION) \
                      and that they may write, read and delete under the prefix";

/// The section's title and its checks.
pub async fn checks(config: &ServeConfig) -> (String, Vec<Check>) {
    let Some(settings) = &config.snapshot_store else {
        return (
            format!("Snapshot store {}", config.snapshot_dir.display()),
            vec![Check::info(
                "snapshot store",
                "a directory: only Garrisons sharing it resume each other's sessions",
            )],
        );
    };
    let title = format!("Snapshot store {}", settings.url);
    // The spool is never used by a probe, and doctor creates nothing here.
    let store = match ObjectSnapshots::open(settings, "doctor", config.snapshot_dir.clone()) {
        Ok(store) => store,
        Err(e) => {
            return (
                title,
                vec![Check::fail("open the store", format!("{e:#}"), REMEDY)],
            );
        }
    };
    let mut checks: Vec<Check> = store
        .probe()
        .await
        .into_iter()
        .map(|(step, outcome)| match outcome {
            Ok(()) => Check::pass(step, "ok"),
            Err(e) => Check::fail(step, e, REMEDY),
        })
        .collect();
    checks.push(match settings.key {
        Some(_) => Check::pass("encryption", "on: archives are sealed with the snapshot key"),
        None => Check::warn(
            "encryption",
            "off: the bucket holds the workspaces' source code in plaintext",
            "set GARRISON_SNAPSHOT_KEY or --snapshot-key-file (64 hex digits, e.g. `openssl rand -hex 32`)",
        ),
    });
    (title, checks)
}
