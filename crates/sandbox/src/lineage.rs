//! A session's sandboxes in the order they held its workspace.
//!
//! Each sandbox Garrison provisions for a session is one generation newer
//! than every snapshot of the session it knows of: a restore from
//! generation `g` makes a sandbox of generation `g + 1`. A snapshot carries
//! its sandbox's generation, so the workspace of the last completed suspend
//! is the snapshot of the highest generation, whatever the clocks of the
//! hosts that took them say and however late a host that lost its claim
//! uploads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Label key of a sandbox's [`Lineage::generation`].
pub const LABEL_GENERATION: &str = "garrison.generation";
/// Label key of a sandbox's [`Lineage::sandbox_created_at_ms`].
pub const LABEL_CREATED_AT_MS: &str = "garrison.created_at_ms";

/// Where a sandbox (and the snapshots taken of it) sits among a session's
/// sandboxes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    /// 1 for a session's first sandbox; one more than the newest snapshot
    /// it could have been restored from for every later one.
    pub generation: u64,
    /// When the orchestrator asked for the sandbox (Unix ms, its clock):
    /// for people reading a manifest, never for ordering.
    pub sandbox_created_at_ms: i64,
}

impl Lineage {
    /// The lineage stored in a sandbox's labels; `None` for a sandbox made
    /// before lineages (or not by the orchestrator).
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<Self> {
        Some(Self {
            generation: labels.get(LABEL_GENERATION)?.parse().ok()?,
            sandbox_created_at_ms: labels.get(LABEL_CREATED_AT_MS)?.parse().ok()?,
        })
    }

    /// Stores the lineage in a sandbox's labels: labels are what every
    /// backend keeps with a sandbox and hands back in its [`crate::Handle`].
    pub fn add_to_labels(&self, labels: &mut BTreeMap<String, String>) {
        labels.insert(LABEL_GENERATION.to_owned(), self.generation.to_string());
        labels.insert(
            LABEL_CREATED_AT_MS.to_owned(),
            self.sandbox_created_at_ms.to_string(),
        );
    }
}

/// The lineage of a new sandbox for a session whose known snapshots reach
/// generation `max_known_generation` (0 when it has none, or only snapshots
/// made before lineages), created at `now_ms`.
pub fn next_lineage(max_known_generation: u64, now_ms: i64) -> Lineage {
    Lineage {
        generation: max_known_generation.saturating_add(1),
        sandbox_created_at_ms: now_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_sandbox_is_one_generation_past_the_known_snapshots() {
        assert_eq!(
            next_lineage(0, 5),
            Lineage {
                generation: 1,
                sandbox_created_at_ms: 5
            }
        );
        assert_eq!(next_lineage(7, 9).generation, 8);
        assert_eq!(next_lineage(u64::MAX, 9).generation, u64::MAX);
    }

    fn snapshot(id: &str, created_at_ms: i64, lineage: Option<Lineage>) -> crate::SnapshotRef {
        crate::SnapshotRef {
            backend: "host".into(),
            id: id.into(),
            size_bytes: 1,
            created_at_ms,
            base_image: None,
            sha256: None,
            lineage,
        }
    }

    fn sorted(mut snapshots: Vec<crate::SnapshotRef>) -> Vec<String> {
        snapshots.sort_by(|a, b| a.resume_order().cmp(&b.resume_order()));
        snapshots.into_iter().map(|s| s.id).collect()
    }

    #[test]
    fn resume_order_puts_generations_before_clocks_and_legacy_first() {
        let of = |generation, sandbox_created_at_ms| {
            Some(Lineage {
                generation,
                sandbox_created_at_ms,
            })
        };
        let order = sorted(vec![
            // A host that lost its claim uploads late (or its clock runs
            // ahead): the newest timestamp, an older generation.
            snapshot("late-stale", 9_000, of(2, 100)),
            snapshot("last-suspend", 5_000, of(3, 4_000)),
            snapshot("legacy-new", 8_000, None),
            snapshot("first", 1_000, of(1, 10)),
            snapshot("legacy-old", 500, None),
        ]);
        assert_eq!(
            order,
            [
                "legacy-old",
                "legacy-new",
                "first",
                "late-stale",
                "last-suspend"
            ]
        );
    }

    #[test]
    fn resume_order_within_a_generation_follows_the_sandbox_then_the_snapshot() {
        let a = Some(Lineage {
            generation: 2,
            sandbox_created_at_ms: 100,
        });
        // Made later from the same snapshot: by the host that claimed later.
        let b = Some(Lineage {
            generation: 2,
            sandbox_created_at_ms: 200,
        });
        let order = sorted(vec![
            snapshot("b-2", 300, b),
            snapshot("a-late", 900, a),
            snapshot("b-1", 250, b),
            snapshot("a-1", 150, a),
        ]);
        assert_eq!(order, ["a-1", "a-late", "b-1", "b-2"]);
        // Equal in all else, the id decides, so every host agrees.
        assert_eq!(
            sorted(vec![snapshot("y", 1, a), snapshot("x", 1, a)]),
            ["x", "y"]
        );
    }

    #[test]
    fn snapshots_without_a_lineage_still_load_and_others_keep_it() {
        let legacy =
            r#"{"backend":"host","id":"s-1","size_bytes":1,"created_at_ms":5,"base_image":null}"#;
        let read: crate::SnapshotRef = serde_json::from_str(legacy).unwrap();
        assert_eq!(read.lineage, None);
        assert!(!serde_json::to_string(&read).unwrap().contains("lineage"));
        let with = snapshot("s-2", 5, Some(next_lineage(1, 7)));
        let back: crate::SnapshotRef =
            serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back, with);
    }

    #[test]
    fn lineage_round_trips_through_labels() {
        let lineage = next_lineage(3, 1_700_000_000_123);
        let mut labels = crate::session_labels("s", "o");
        assert_eq!(Lineage::from_labels(&labels), None);
        lineage.add_to_labels(&mut labels);
        assert_eq!(labels[LABEL_GENERATION], "4");
        assert_eq!(Lineage::from_labels(&labels), Some(lineage));
        labels.insert(LABEL_GENERATION.to_owned(), "x".to_owned());
        assert_eq!(Lineage::from_labels(&labels), None);
    }
}
