//! Snapshots kept by design, which are not leftovers: a session whose
//! final status a host could never read (it left the fleet API before one
//! arrived; the host records `final_status_unknown`) keeps a Recovery
//! snapshot for the retention period, since no one said it ended. Every
//! recorded snapshot of such a session (its archive and manifest in the
//! bucket) is allowed at the end of a run.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::history::{History, Leftover};

/// The event a host records when it winds down a session whose final
/// status it cannot read.
const FINAL_STATUS_UNKNOWN: &str = "final_status_unknown";

/// The sessions (of `ids`) some host recorded `final_status_unknown` for,
/// read from each host's state store under `state_dirs`.
pub(crate) fn final_status_unknown(state_dirs: &[PathBuf], ids: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for dir in state_dirs {
        let Ok(store) = orchestrator::Store::open_existing(&orchestrator::db_path(dir)) else {
            continue;
        };
        for id in ids {
            let Ok(session) = fleet::SessionId::new(id.as_str()) else {
                continue;
            };
            let events = store.events(&session, 0).unwrap_or_default();
            if events.iter().any(|e| e.kind == FINAL_STATUS_UNKNOWN) {
                found.insert(id.clone());
            }
        }
    }
    found
}

/// Whether `left` is a recorded snapshot (archive or manifest in the
/// bucket) of a session whose final status some host could not read.
pub(crate) fn kept_for_retention(history: &History, left: &Leftover) -> bool {
    let is_snapshot = left.host.is_none()
        && (left.path.ends_with(".tar.zst") || left.path.ends_with(".json"))
        && !left.path.contains("/leases/")
        && !left.path.contains("/doomed/");
    is_snapshot
        && history.final_status_unknown.iter().any(|id| {
            let name = sandbox::SandboxName::for_session(id);
            let file = left.path.rsplit('/').next().unwrap_or_default();
            file.starts_with(&format!("{name}-"))
        })
}

/// How many leftovers are kept by design.
pub(crate) fn kept_count(history: &History) -> usize {
    history
        .leftovers
        .iter()
        .filter(|l| kept_for_retention(history, l))
        .count()
}
