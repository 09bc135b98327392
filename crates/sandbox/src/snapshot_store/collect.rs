//! What a collection pass does with one snapshot in a shared object store:
//! the pure half of the lease protocol described in [`super::object`].

/// What a collector knows of one snapshot id (Unix ms, as the store's
/// clock stamped the objects).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SnapshotSeen {
    /// The newest last-modified of its archive and manifest, if either
    /// exists.
    pub modified_at: Option<i64>,
    /// The newest of its leases, if any.
    pub leased_at: Option<i64>,
}

/// What to do with one snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Leave it.
    Keep,
    /// Old and unleased: write this collector's tombstone, look at its
    /// leases again, and delete it only if none is fresh.
    Collect,
}

/// How long a lease or a tombstone counts after it was written: a restore
/// rewrites its lease well within this while it reads, and a collector
/// removes its tombstone within seconds, so an older one was left by a
/// process that died.
pub(crate) const LEASE_TTL_MS: i64 = 60 * 60 * 1000;

/// Decides one snapshot: old (modified before `cutoff`) and without a
/// fresh lease is collected, whichever Garrison wrote it.
pub(crate) fn verdict(seen: &SnapshotSeen, cutoff: i64, now: i64) -> Verdict {
    let leased = seen.leased_at.is_some_and(|at| is_fresh(at, now));
    match seen.modified_at {
        Some(at) if at < cutoff && !leased => Verdict::Collect,
        _ => Verdict::Keep,
    }
}

/// Whether a lease or tombstone written at `written_at` still counts at
/// `now`.
pub(crate) fn is_fresh(written_at: i64, now: i64) -> bool {
    now - written_at < LEASE_TTL_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 100 * LEASE_TTL_MS;
    const CUTOFF: i64 = NOW - 10 * LEASE_TTL_MS;

    fn seen(modified_at: Option<i64>, leased_at: Option<i64>) -> SnapshotSeen {
        SnapshotSeen {
            modified_at,
            leased_at,
        }
    }

    #[test]
    fn age_decides_and_a_fresh_lease_overrules_it() {
        let old = Some(CUTOFF - 1);
        let young = Some(CUTOFF + 1);
        assert_eq!(verdict(&seen(old, None), CUTOFF, NOW), Verdict::Collect);
        assert_eq!(verdict(&seen(young, None), CUTOFF, NOW), Verdict::Keep);
        assert_eq!(
            verdict(&seen(old, Some(NOW - 1)), CUTOFF, NOW),
            Verdict::Keep
        );
        // A lease its reader stopped renewing (it crashed) no longer holds.
        let stale = Some(NOW - LEASE_TTL_MS);
        assert_eq!(verdict(&seen(old, stale), CUTOFF, NOW), Verdict::Collect);
        // Only leases or tombstones left: nothing to collect.
        assert_eq!(verdict(&seen(None, None), CUTOFF, NOW), Verdict::Keep);
    }

    #[test]
    fn leases_and_tombstones_count_for_an_hour() {
        assert!(is_fresh(NOW - 1, NOW));
        assert!(is_fresh(NOW - LEASE_TTL_MS + 1, NOW));
        assert!(!is_fresh(NOW - LEASE_TTL_MS, NOW));
    }
}
