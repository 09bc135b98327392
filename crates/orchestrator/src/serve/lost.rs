//! The minute's second question: sessions this host lost, and asked "is it
//! over?" without a final answer (none, being cut off from the fleet API,
//! or one still alive), are asked again until one comes, and their
//! snapshots go once they are over.

use std::collections::BTreeSet;

use tracing::debug;

use crate::planner::asks_again;
use crate::session::{ASKED_IF_OVER as ASKED, Deps, GONE, ask_again_if_over};
use crate::store::Store;
use fleet::SessionId;

/// Asks again about every session [`to_ask_again`] names; returns how
/// many sessions' snapshots went.
pub(super) async fn ask_again_about_lost_sessions(deps: &Deps) -> usize {
    let mut over = 0;
    for session_id in to_ask_again(&deps.store, deps.backend.kind()) {
        debug!(
            session_id = session_id.as_str(),
            "asking again whether a lost session is over"
        );
        if ask_again_if_over(deps, session_id).await {
            over += 1;
        }
    }
    over
}

/// The lost sessions of backend `kind` whose recorded snapshots are kept
/// only because their last question had no final answer.
fn to_ask_again(store: &Store, kind: &str) -> Vec<SessionId> {
    let Ok(recorded) = store.snapshots_older_than(i64::MAX) else {
        return Vec::new();
    };
    let sessions: BTreeSet<_> = recorded
        .into_iter()
        .filter(|s| s.snapshot.backend == kind)
        .map(|s| s.session_id)
        .collect();
    sessions
        .into_iter()
        .filter(|session_id| {
            let Ok(Some(rec)) = store.session(session_id) else {
                return false;
            };
            let events = store.events(session_id, 0).unwrap_or_default();
            let last_asked = events
                .iter()
                .rev()
                .find(|e| e.kind == ASKED)
                .and_then(|e| e.detail.get("status")?.as_str());
            asks_again(rec.stage, last_asked, GONE)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::{Finish, Stage};
    use crate::session::UNANSWERED;
    use crate::store::{SessionRecord, SnapshotReason, StoredSnapshot};
    use serde_json::json;

    #[test]
    fn only_lost_sessions_without_a_final_answer_and_with_snapshots_are_asked_again() {
        let store = Store::in_memory().unwrap();
        let lost = Stage::Done(Finish::Vanished);
        for (session, stage, asked, snapshot_backend) in [
            ("unanswered", lost, Some(UNANSWERED), "host"),
            ("alive-when-asked", lost, Some("running"), "host"),
            // Asked twice: the later answer counts.
            ("gone", lost, Some(GONE), "host"),
            ("never-asked", lost, None, "host"),
            (
                "ended-here",
                Stage::Done(Finish::Terminated),
                Some(UNANSWERED),
                "host",
            ),
            ("other-backend", lost, Some(UNANSWERED), "local"),
        ] {
            let id = SessionId::new(session).unwrap();
            let mut rec = SessionRecord::new(&id, "o", fleet::SessionKind::New, "host", 0);
            rec.stage = stage;
            store.put_session(&rec).unwrap();
            if session == "gone" {
                let first = json!({ "status": UNANSWERED, "over": false });
                store.add_event(&id, 1, ASKED, &first).unwrap();
            }
            if let Some(status) = asked {
                let detail = json!({ "status": status, "over": false });
                store.add_event(&id, 2, ASKED, &detail).unwrap();
            }
            let snapshot = sandbox::SnapshotRef {
                backend: snapshot_backend.to_owned(),
                id: format!("{session}-1"),
                size_bytes: 1,
                created_at_ms: 1,
                base_image: None,
                sha256: None,
                lineage: None,
            };
            store
                .add_snapshot(&StoredSnapshot {
                    session_id: id,
                    reason: SnapshotReason::Recovery,
                    snapshot,
                })
                .unwrap();
        }
        // A lost session left unanswered but with no snapshot kept.
        let id = SessionId::new("nothing-kept").unwrap();
        let mut rec = SessionRecord::new(&id, "o", fleet::SessionKind::New, "host", 0);
        rec.stage = lost;
        store.put_session(&rec).unwrap();
        let detail = json!({ "status": UNANSWERED, "over": false });
        store.add_event(&id, 2, ASKED, &detail).unwrap();

        let asked: Vec<String> = to_ask_again(&store, "host")
            .into_iter()
            .map(|id| id.as_str().to_owned())
            .collect();
        assert_eq!(asked, ["alive-when-asked", "unanswered"]);
    }
}
