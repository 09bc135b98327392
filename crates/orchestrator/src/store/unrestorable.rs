//! Sessions this Garrison found it cannot restore: their snapshot is
//! intact but no attempt can unpack it (`SandboxError::Unrestorable`). The
//! mark keeps the claim planner from taking the session again, across
//! restarts, while the snapshot is kept for the operator; it goes with the
//! snapshot (retention, `garrison terminate`), or when the operator clears
//! it. It is this host's: another Garrison sharing the snapshot store
//! decides for itself (its tar may restore what this one cannot).

use std::collections::BTreeSet;

use anyhow::Result;
use fleet::SessionId;
use rusqlite::params;
use serde::{Deserialize, Serialize};

use super::db::{Store, session_id};
use crate::planner::Millis;

/// Why a session is not claimed here again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unrestorable {
    /// The session.
    pub session_id: SessionId,
    /// The snapshot.
    pub snapshot_id: String,
    /// Bounded (`bound::error_text`).
    pub reason: String,
    /// When.
    pub at: Millis,
}

impl Store {
    /// Marks a session whose snapshot cannot be restored here.
    pub fn mark_unrestorable(&self, mark: &Unrestorable) -> Result<()> {
        let reason = super::bound::error_text(&mark.reason);
        self.write(|c| {
            c.execute(
                "INSERT OR REPLACE INTO unrestorable (session_id, snapshot_id, reason, at) VALUES (?1, ?2, ?3, ?4)",
                params![mark.session_id.as_str(), mark.snapshot_id, reason, mark.at],
            )
            .map(drop)
        })
    }

    /// Every session marked, oldest first (for `doctor` and the listings).
    pub fn unrestorable(&self) -> Result<Vec<Unrestorable>> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT session_id, snapshot_id, reason, at FROM unrestorable ORDER BY at",
            )?;
            stmt.query_map([], |row| {
                Ok(Unrestorable {
                    session_id: session_id("unrestorable", row.get(0)?)?,
                    snapshot_id: row.get(1)?,
                    reason: row.get(2)?,
                    at: row.get(3)?,
                })
            })?
            .collect()
        })
    }

    /// The ids of the sessions marked, for the claim planner.
    pub fn unrestorable_ids(&self) -> Result<BTreeSet<SessionId>> {
        self.with(|c| {
            let mut stmt = c.prepare_cached("SELECT session_id FROM unrestorable")?;
            stmt.query_map([], |row| session_id("unrestorable", row.get(0)?))?
                .collect()
        })
    }

    /// The session's mark, if any.
    pub fn unrestorable_session(&self, session_id: &SessionId) -> Result<Option<Unrestorable>> {
        Ok(self
            .unrestorable()?
            .into_iter()
            .find(|u| &u.session_id == session_id))
    }

    /// Lets the session be claimed here again (the operator mended the
    /// host, or wants another try). True if it was marked.
    pub fn clear_unrestorable(&self, session_id: &SessionId) -> Result<bool> {
        self.write(|c| {
            c.execute(
                "DELETE FROM unrestorable WHERE session_id = ?1",
                [session_id.as_str()],
            )
            .map(|n| n > 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SnapshotReason, StoredSnapshot};

    #[test]
    fn a_mark_is_kept_bounded_and_goes_with_its_snapshot() {
        let store = Store::in_memory().unwrap();
        let s = SessionId::new("s").unwrap();
        let mark = Unrestorable {
            session_id: s.clone(),
            snapshot_id: "snap".into(),
            reason: "x".repeat(1 << 20),
            at: 5,
        };
        store.mark_unrestorable(&mark).unwrap();
        let kept = store.unrestorable_session(&s).unwrap().unwrap();
        assert!(kept.reason.len() < 10 << 10);
        assert_eq!(
            store.unrestorable_ids().unwrap(),
            BTreeSet::from([s.clone()])
        );
        store
            .add_snapshot(&StoredSnapshot {
                session_id: s.clone(),
                reason: SnapshotReason::Suspend,
                snapshot: sandbox::SnapshotRef {
                    backend: "local".into(),
                    id: "snap".into(),
                    size_bytes: 1,
                    created_at_ms: 1,
                    base_image: None,
                    sha256: None,
                    lineage: None,
                },
            })
            .unwrap();
        store.remove_snapshot("snap").unwrap();
        assert!(store.unrestorable_ids().unwrap().is_empty());
        store.mark_unrestorable(&mark).unwrap();
        assert!(store.clear_unrestorable(&s).unwrap());
        assert!(!store.clear_unrestorable(&s).unwrap());
    }
}
