//! Whether the state directory has room for new work: decided from a
//! reading of its free space and of how the state store's last write went.
//!
//! A session is claimed only when its record can be written (every step is
//! recorded before it runs), so while the state directory is short of room
//! nothing new is claimed; sessions already held keep running. The reading
//! is taken again every claim round, and claiming resumes by itself once
//! the room is back.

/// The free space the state directory keeps in reserve unless set
/// otherwise (`state_dir_min_free_mb`): enough for every held session's
/// records and logs to go on while no new session is claimed.
pub(crate) const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// What [`assess_room`] looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RoomObs {
    /// Bytes free to Garrison in the state directory's file system; `None`
    /// when it could not be read (then only the store's word counts).
    pub free_bytes: Option<u64>,
    /// The reserve below which nothing new is claimed.
    pub min_free_bytes: u64,
    /// The state store's last write failed for want of space and none has
    /// succeeded since (a quota or a lack of inodes shows only so).
    pub store_full: bool,
}

/// How much room the state directory has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// Enough: claim as usual.
    Enough,
    /// Too little: claim nothing new.
    Short(Shortage),
}

/// Why the state directory is short of room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shortage {
    /// The free space is below the reserve.
    BelowReserve {
        /// Bytes free.
        free_bytes: u64,
        /// The reserve.
        min_free_bytes: u64,
    },
    /// A write to the state store failed for want of space.
    StoreFull,
}

impl Room {
    /// Whether nothing new may be claimed.
    pub(crate) fn is_short(&self) -> bool {
        matches!(self, Room::Short(_))
    }
}

/// Whether the state directory has room for new work. A failed store write
/// outweighs a free-space reading that looks fine: it is what the store
/// met, whatever the reason (quota, inodes).
pub(crate) fn assess_room(obs: &RoomObs) -> Room {
    if obs.store_full {
        return Room::Short(Shortage::StoreFull);
    }
    match obs.free_bytes {
        Some(free_bytes) if free_bytes < obs.min_free_bytes => {
            Room::Short(Shortage::BelowReserve {
                free_bytes,
                min_free_bytes: obs.min_free_bytes,
            })
        }
        _ => Room::Enough,
    }
}

/// Whether to try a small write to the store to learn that it has room
/// again: only after a write failed for want of space, and only once the
/// free space is back above the reserve (else it would fail again). A write
/// that succeeds is what clears the store's failure; nothing else does.
pub(crate) fn probe_store(obs: &RoomObs) -> bool {
    obs.store_full
        && obs
            .free_bytes
            .is_none_or(|free_bytes| free_bytes >= obs.min_free_bytes)
}

/// A change worth one line in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RoomChange {
    /// The room ran short: claiming stops.
    RanShort(Shortage),
    /// The room is back: claiming resumes.
    Recovered,
}

/// What changed between two assessments: only the edges are told, so a
/// state directory that stays full is logged once, not every round.
pub(crate) fn room_change(before: Room, after: Room) -> Option<RoomChange> {
    match (before, after) {
        (Room::Enough, Room::Short(why)) => Some(RoomChange::RanShort(why)),
        (Room::Short(_), Room::Enough) => Some(RoomChange::Recovered),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn obs(free_mib: Option<u64>, store_full: bool) -> RoomObs {
        RoomObs {
            free_bytes: free_mib.map(|m| m * MIB),
            min_free_bytes: 64 * MIB,
            store_full,
        }
    }

    #[test]
    fn free_space_below_the_reserve_is_short() {
        assert_eq!(
            assess_room(&obs(Some(10), false)),
            Room::Short(Shortage::BelowReserve {
                free_bytes: 10 * MIB,
                min_free_bytes: 64 * MIB
            })
        );
        assert_eq!(assess_room(&obs(Some(64), false)), Room::Enough);
        assert_eq!(assess_room(&obs(Some(1000), false)), Room::Enough);
    }

    #[test]
    fn a_full_store_is_short_whatever_the_free_space_says() {
        for free in [None, Some(0), Some(1000)] {
            assert_eq!(
                assess_room(&obs(free, true)),
                Room::Short(Shortage::StoreFull),
                "{free:?}"
            );
        }
    }

    #[test]
    fn an_unreadable_free_space_leaves_the_store_to_tell() {
        assert_eq!(assess_room(&obs(None, false)), Room::Enough);
    }

    #[test]
    fn a_reserve_of_zero_never_stops_claims_by_itself() {
        let zero = RoomObs {
            free_bytes: Some(0),
            min_free_bytes: 0,
            store_full: false,
        };
        assert_eq!(assess_room(&zero), Room::Enough);
    }

    #[test]
    fn the_store_is_probed_only_after_a_failure_and_once_space_is_back() {
        assert!(!probe_store(&obs(Some(1000), false)), "nothing failed");
        assert!(!probe_store(&obs(Some(1), true)), "still below the reserve");
        assert!(probe_store(&obs(Some(1000), true)));
        assert!(probe_store(&obs(None, true)), "only a write can tell");
    }

    #[test]
    fn only_the_edges_are_told() {
        let short = Room::Short(Shortage::StoreFull);
        let below = Room::Short(Shortage::BelowReserve {
            free_bytes: 0,
            min_free_bytes: 1,
        });
        assert_eq!(
            room_change(Room::Enough, short),
            Some(RoomChange::RanShort(Shortage::StoreFull))
        );
        assert_eq!(room_change(short, below), None, "still short");
        assert_eq!(room_change(short, short), None);
        assert_eq!(
            room_change(below, Room::Enough),
            Some(RoomChange::Recovered)
        );
        assert_eq!(room_change(Room::Enough, Room::Enough), None);
    }
}
