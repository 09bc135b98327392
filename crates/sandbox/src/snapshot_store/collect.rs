//! What a collection pass does with one snapshot in a shared object store:
//! the pure half of the lease protocol described in
//! [`super::object`].

/// What a collector knows of one snapshot id at `now` (all Unix ms, as the
/// store's clock stamped the objects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotSeen {
    /// The newest last-modified of its archive and manifest, if either
    /// exists.
    pub modified_at: Option<i64>,
    /// The newest of its leases, if any.
    pub leased_at: Option<i64>,
    /// It has a tombstone (a collector condemned it).
    pub condemned: bool,
}

/// What to do with one snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Old and unleased: write its tombstone, look at its leases again, and
    /// delete it only if none is fresh.
    Collect,
    /// A tombstone whose snapshot is gone, or that a fresh lease overrules:
    /// remove the tombstone.
    Pardon,
}

/// How long a lease counts after it was last written: a restore rewrites
/// its lease well within this while it reads.
pub const LEASE_TTL_MS: i64 = 60 * 60 * 1000;

/// Decides one snapshot: old (modified before `cutoff`) and without a
/// fresh lease is collected, whichever Garrison wrote it.
pub fn verdict(seen: &SnapshotSeen, cutoff: i64, now: i64) -> Verdict {
    let leased = seen.leased_at.is_some_and(|at| now - at < LEASE_TTL_MS);
    match seen.modified_at {
        None if seen.condemned => Verdict::Pardon,
        None => Verdict::Keep,
        Some(_) if leased && seen.condemned => Verdict::Pardon,
        Some(_) if leased => Verdict::Keep,
        Some(at) if at < cutoff => Verdict::Collect,
        Some(_) if seen.condemned => Verdict::Pardon,
        Some(_) => Verdict::Keep,
    }
}

/// Whether a lease written at `leased_at` still holds at `now`.
pub fn lease_is_fresh(leased_at: i64, now: i64) -> bool {
    now - leased_at < LEASE_TTL_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 100 * LEASE_TTL_MS;
    const CUTOFF: i64 = NOW - 10 * LEASE_TTL_MS;

    fn seen(modified_at: Option<i64>, leased_at: Option<i64>, condemned: bool) -> SnapshotSeen {
        SnapshotSeen {
            modified_at,
            leased_at,
            condemned,
        }
    }

    #[test]
    fn age_decides_and_a_fresh_lease_overrules_it() {
        let old = Some(CUTOFF - 1);
        let young = Some(CUTOFF + 1);
        assert_eq!(
            verdict(&seen(old, None, false), CUTOFF, NOW),
            Verdict::Collect
        );
        assert_eq!(
            verdict(&seen(old, None, true), CUTOFF, NOW),
            Verdict::Collect
        );
        assert_eq!(
            verdict(&seen(young, None, false), CUTOFF, NOW),
            Verdict::Keep
        );
        assert_eq!(
            verdict(&seen(old, Some(NOW - 1), false), CUTOFF, NOW),
            Verdict::Keep
        );
        assert_eq!(
            verdict(&seen(old, Some(NOW - 1), true), CUTOFF, NOW),
            Verdict::Pardon
        );
        // A lease its reader stopped renewing (it crashed) no longer holds.
        let stale = Some(NOW - LEASE_TTL_MS);
        assert_eq!(
            verdict(&seen(old, stale, false), CUTOFF, NOW),
            Verdict::Collect
        );
    }

    #[test]
    fn tombstones_without_a_snapshot_or_on_a_young_one_are_pardoned() {
        assert_eq!(
            verdict(&seen(None, None, true), CUTOFF, NOW),
            Verdict::Pardon
        );
        assert_eq!(
            verdict(&seen(None, None, false), CUTOFF, NOW),
            Verdict::Keep
        );
        assert_eq!(
            verdict(&seen(Some(CUTOFF + 1), None, true), CUTOFF, NOW),
            Verdict::Pardon
        );
        assert!(lease_is_fresh(NOW - 1, NOW));
        assert!(!lease_is_fresh(NOW - LEASE_TTL_MS, NOW));
    }
}
