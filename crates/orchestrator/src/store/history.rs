//! A session's history beside its record: the snapshots kept of it (found
//! again to resume, or by age for the retention sweep) and its event log.

use anyhow::Result;
use fleet::SessionId;
use rusqlite::params;
use sandbox::SnapshotRef;
use serde::{Deserialize, Serialize};

use super::db::{Store, json, parse, session_id};
use crate::planner::{Millis, SnapshotReason};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// A snapshot kept of a session.
pub struct StoredSnapshot {
    /// The session.
    pub session_id: SessionId,
    /// Why it was kept.
    pub reason: SnapshotReason,
    /// The snapshot.
    pub snapshot: SnapshotRef,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
/// An entry of a session's history.
pub struct Event {
    /// Its order.
    pub id: i64,
    /// The session.
    pub session_id: SessionId,
    /// When.
    pub at: Millis,
    /// What happened.
    pub kind: String,
    /// The details.
    pub detail: serde_json::Value,
}

impl Store {
    /// Records a snapshot.
    pub fn add_snapshot(&self, stored: &StoredSnapshot) -> Result<()> {
        let snapshot = json(&stored.snapshot)?;
        let reason = json(&stored.reason)?;
        self.write(|c| {
            c.execute(
                "INSERT OR REPLACE INTO snapshots (id, session_id, reason, snapshot, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![stored.snapshot.id, stored.session_id.as_str(), reason, snapshot, stored.snapshot.created_at_ms],
            )
            .map(drop)
        })
    }

    fn query_snapshots(
        &self,
        sql: &str,
        param: &dyn rusqlite::ToSql,
    ) -> Result<Vec<StoredSnapshot>> {
        self.with(|c| {
            let mut stmt = c.prepare(sql)?;
            stmt.query_map([param], |row| {
                Ok(StoredSnapshot {
                    session_id: session_id("snapshots", row.get(0)?)?,
                    reason: parse(&row.get::<_, String>(1)?)?,
                    snapshot: parse(&row.get::<_, String>(2)?)?,
                })
            })?
            .collect()
        })
    }

    /// The size of each session's newest snapshot, in one query (the
    /// session listing shows it for every session).
    pub fn newest_snapshot_bytes(&self) -> Result<std::collections::HashMap<SessionId, u64>> {
        let all = self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT session_id, snapshot FROM snapshots ORDER BY session_id, created_at",
            )?;
            stmt.query_map([], |row| {
                Ok((
                    session_id("snapshots", row.get(0)?)?,
                    parse::<SnapshotRef>(&row.get::<_, String>(1)?)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })?;
        let mut newest: std::collections::HashMap<SessionId, SnapshotRef> = Default::default();
        for (session_id, snapshot) in all {
            let keep = newest
                .get(&session_id)
                .is_none_or(|kept| snapshot.created_at_ms >= kept.created_at_ms);
            if keep {
                newest.insert(session_id, snapshot);
            }
        }
        Ok(newest
            .into_iter()
            .map(|(id, s)| (id, s.size_bytes))
            .collect())
    }

    /// A session's snapshots, oldest first.
    pub fn snapshots(&self, session_id: &SessionId) -> Result<Vec<StoredSnapshot>> {
        self.query_snapshots(
            "SELECT session_id, reason, snapshot FROM snapshots WHERE session_id = ?1 ORDER BY created_at",
            &session_id.as_str(),
        )
    }

    /// Snapshots created before `cutoff`, for the retention sweep.
    pub fn snapshots_older_than(&self, cutoff: Millis) -> Result<Vec<StoredSnapshot>> {
        self.query_snapshots(
            "SELECT session_id, reason, snapshot FROM snapshots WHERE created_at < ?1 ORDER BY created_at",
            &cutoff,
        )
    }

    /// Forgets a snapshot, and the mark of a session found unrestorable
    /// from it: with the snapshot gone, a claim would start afresh.
    pub fn remove_snapshot(&self, snapshot_id: &str) -> Result<()> {
        self.write(|c| {
            c.execute("DELETE FROM snapshots WHERE id = ?1", [snapshot_id])?;
            c.execute(
                "DELETE FROM unrestorable WHERE snapshot_id = ?1",
                [snapshot_id],
            )
            .map(drop)
        })
    }

    /// Adds to the session's history.
    pub fn add_event(
        &self,
        session_id: &SessionId,
        at: Millis,
        kind: &str,
        detail: &serde_json::Value,
    ) -> Result<i64> {
        let detail = json(&super::bound::detail(detail))?;
        self.write(|c| {
            c.prepare_cached(
                "INSERT INTO events (session_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![session_id.as_str(), at, kind, detail])?;
            Ok(c.last_insert_rowid())
        })
    }

    /// A session's events after `after_id`, oldest first.
    pub fn events(&self, session_id: &SessionId, after_id: i64) -> Result<Vec<Event>> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT id, session_id, at, kind, detail FROM events WHERE session_id = ?1 AND id > ?2 ORDER BY id",
            )?;
            stmt.query_map(params![session_id.as_str(), after_id], |row| {
                Ok(Event {
                    id: row.get(0)?,
                    session_id: super::db::session_id("events", row.get(1)?)?,
                    at: row.get(2)?,
                    kind: row.get(3)?,
                    detail: parse(&row.get::<_, String>(4)?)?,
                })
            })?
            .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_and_events() {
        let store = Store::in_memory().unwrap();
        let (s, t) = (SessionId::new("s").unwrap(), SessionId::new("t").unwrap());
        let snap = |id: &str, at: i64| StoredSnapshot {
            session_id: s.clone(),
            reason: SnapshotReason::Suspend,
            snapshot: SnapshotRef {
                backend: "host".into(),
                id: id.into(),
                size_bytes: 1,
                created_at_ms: at,
                base_image: None,
                sha256: None,
                lineage: None,
            },
        };
        store.add_snapshot(&snap("old", 1)).unwrap();
        store.add_snapshot(&snap("new", 5)).unwrap();
        assert_eq!(store.snapshots(&s).unwrap().len(), 2);
        let mut bigger = snap("newest", 9);
        bigger.snapshot.size_bytes = 7;
        bigger.session_id = t.clone();
        store.add_snapshot(&bigger).unwrap();
        let sizes = store.newest_snapshot_bytes().unwrap();
        assert_eq!((sizes["s"], sizes["t"], sizes.len()), (1, 7, 2));
        store.remove_snapshot("newest").unwrap();
        assert_eq!(store.snapshots_older_than(3).unwrap(), vec![snap("old", 1)]);
        store.remove_snapshot("old").unwrap();
        assert_eq!(store.snapshots(&s).unwrap(), vec![snap("new", 5)]);

        let first = store
            .add_event(&s, 1, "claimed", &serde_json::json!({"a": 1}))
            .unwrap();
        store
            .add_event(&s, 2, "started", &serde_json::json!({}))
            .unwrap();
        let after = store.events(&s, first).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].kind, "started");
    }
}
