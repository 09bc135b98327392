//! The snapshot store: an object store is probed (a small object written,
//! read back and deleted, each step reported); a directory needs nothing.
//! And the snapshots this host found it cannot restore, from the state
//! store.

use orchestrator::settings::ServeConfig;
use sandbox::ObjectSnapshots;

use super::check::Check;

const REMEDY: &str = "check the URL, the endpoint (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP for http), \
                      the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION) \
                      and that they may write, read and delete under the prefix";

/// The section's title and its checks.
pub(super) async fn checks(config: &ServeConfig) -> (String, Vec<Check>) {
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

/// Sessions whose snapshot this host cannot restore (kept, and not
/// claimed here again), as the state store in `state_dir` records them;
/// read beside a running daemon, never created.
pub(super) fn unrestorable(state_dir: &std::path::Path) -> Check {
    let name = "unrestorable snapshots";
    let path = orchestrator::db_path(state_dir);
    let marks =
        match orchestrator::Store::open_existing(&path).and_then(|store| store.unrestorable()) {
            Ok(marks) => marks,
            Err(_) => return Check::info(name, "none recorded"),
        };
    if marks.is_empty() {
        return Check::pass(name, "none");
    }
    let listed: Vec<String> = marks
        .iter()
        .take(5)
        .map(|m| {
            let reason: String = m.reason.chars().take(160).collect();
            format!("{} (snapshot {}): {reason}", m.session_id, m.snapshot_id)
        })
        .collect();
    Check::warn(
        name,
        format!(
            "{} session(s) given up here: {}",
            marks.len(),
            listed.join("; ")
        ),
        "their snapshots are kept for you and this Garrison will not claim them again \
         until snapshot retention deletes them; `garrison sessions` shows each one's error",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::doctor::check::Outcome;

    #[test]
    fn sessions_given_up_here_are_listed_with_their_reason() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(unrestorable(dir.path()).outcome, Outcome::Info);
        let store = orchestrator::Store::open(&orchestrator::db_path(dir.path())).unwrap();
        assert_eq!(unrestorable(dir.path()).outcome, Outcome::Pass);
        store
            .mark_unrestorable(&orchestrator::Unrestorable {
                session_id: fleet::SessionId::new("devin-deep").unwrap(),
                snapshot_id: "snap-1".into(),
                reason: "a path of 7700 bytes, longer than PATH_MAX".into(),
                at: 1,
            })
            .unwrap();
        let check = unrestorable(dir.path());
        assert_eq!(check.outcome, Outcome::Warn);
        assert!(
            check
                .detail
                .contains("devin-deep (snapshot snap-1): a path of 7700 bytes"),
            "{}",
            check.detail
        );
    }
}
