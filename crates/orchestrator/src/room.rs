//! The state directory's room, read each claim round: its free space and
//! how the state store's last write went, judged by
//! [`crate::planner::assess_room`]. While it is short, the outpost loops
//! claim nothing new, readiness says why, and the change is logged once;
//! when the room is back, claiming resumes by itself and that is logged
//! too.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use crate::planner::{Room, RoomChange, RoomObs, Shortage, assess_room, probe_store, room_change};
use crate::store::Store;
use common::now_ms;

/// The state directory's room as last read, shared by every outpost loop
/// and the admin listener.
pub(crate) struct StateRoom {
    state_dir: PathBuf,
    min_free_bytes: u64,
    store: Arc<Store>,
    last: Mutex<Room>,
}

impl StateRoom {
    /// Watches `state_dir` (holding `store`), keeping `min_free_bytes` in
    /// reserve.
    pub(crate) fn new(state_dir: &Path, min_free_bytes: u64, store: Arc<Store>) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
            min_free_bytes,
            store,
            last: Mutex::new(Room::Enough),
        }
    }

    /// Reads the room now, logs a change of it (once, however many loops
    /// ask) and returns it. After a store write failed for want of space,
    /// only a write that succeeds says the store has room again: one small
    /// write is tried once the free space is back.
    pub(crate) fn check(&self) -> Room {
        let mut obs = RoomObs {
            free_bytes: free_bytes(&self.state_dir),
            min_free_bytes: self.min_free_bytes,
            store_full: self.store.out_of_space(),
        };
        if probe_store(&obs) {
            // The outcome is what `out_of_space` now says.
            let _ = self.store.probe_write(now_ms());
            obs.store_full = self.store.out_of_space();
        }
        let room = assess_room(&obs);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match room_change(*last, room) {
            Some(RoomChange::RanShort(why)) => warn!(
                state_dir = %self.state_dir.display(),
                "{}; sessions already held keep running. Free space on that file system \
                 (old session logs under sessions/, snapshots, other files) and claiming \
                 resumes by itself",
                self.describe(why)
            ),
            Some(RoomChange::Recovered) => info!(
                state_dir = %self.state_dir.display(),
                "the state directory has room again; claiming new sessions resumes"
            ),
            None => {}
        }
        *last = room;
        room
    }

    /// Why nothing new is claimed, as last read; `None` while there is room.
    pub(crate) fn shortage(&self) -> Option<String> {
        match *self.last.lock().unwrap_or_else(|p| p.into_inner()) {
            Room::Enough => None,
            Room::Short(why) => Some(self.describe(why)),
        }
    }

    fn describe(&self, why: Shortage) -> String {
        let dir = self.state_dir.display();
        match why {
            Shortage::BelowReserve {
                free_bytes,
                min_free_bytes,
            } => format!(
                "the state directory {dir} has {} MiB free, below the {} MiB kept in reserve \
                 (state_dir_min_free_mb): no new session is claimed",
                free_bytes >> 20,
                min_free_bytes >> 20
            ),
            Shortage::StoreFull => format!(
                "the state directory {dir} is full: a write to its state store failed for \
                 want of space: no new session is claimed"
            ),
        }
    }
}

/// Bytes of `dir`'s file system free to an unprivileged writer; `None` when
/// it cannot be read.
fn free_bytes(dir: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(dir).ok()?;
    // The field types differ between platforms.
    #[allow(clippy::useless_conversion)]
    let free = u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size()));
    Some(free)
}
