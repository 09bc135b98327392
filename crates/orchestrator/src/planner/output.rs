//! How much of a remote's output the host copies into the session log.
//!
//! The sandbox writes the output and the host stores it, so the sandbox
//! decides its size: a sparse 1 TiB file, or `yes`, costs it nothing and the
//! host everything. The host copies up to a cap per session and then leaves
//! the rest where it is, saying so once in the log.

/// Enough for days of a remote's ordinary output.
pub(crate) const DEFAULT_SESSION_LOG_MAX_BYTES: u64 = 256 << 20;

/// What to do with a chunk of output read at offset `copied`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OutputAllowance {
    /// Bytes of the chunk to copy (a prefix; may be all or none of it).
    pub take: usize,
    /// This chunk reaches the cap: write the notice now (it is written
    /// once, since afterwards nothing more is read).
    pub cap_reached: bool,
}

/// The part of a `len`-byte chunk, read after `copied` bytes were copied,
/// that stays within `cap`.
pub(crate) fn output_allowance(copied: u64, cap: u64, len: usize) -> OutputAllowance {
    let room = cap.saturating_sub(copied);
    let take = usize::try_from(room).map_or(len, |room| room.min(len));
    OutputAllowance {
        take,
        cap_reached: room > 0 && (len as u64) >= room,
    }
}

/// Whether the copy is over for good: the cap was reached earlier.
pub(crate) fn output_exhausted(copied: u64, cap: u64) -> bool {
    copied >= cap
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_within_the_cap_and_says_so_once_when_it_is_reached() {
        let cases = [
            // (copied, cap, len) -> (take, cap_reached)
            ((0, 100, 10), (10, false)),
            ((90, 100, 9), (9, false)),
            ((90, 100, 10), (10, true)),
            ((90, 100, 50), (10, true)),
            ((100, 100, 50), (0, false)),
            ((150, 100, 50), (0, false)),
            ((0, u64::MAX, 1 << 20), (1 << 20, false)),
        ];
        for ((copied, cap, len), (take, cap_reached)) in cases {
            assert_eq!(
                output_allowance(copied, cap, len),
                OutputAllowance { take, cap_reached },
                "copied {copied}, cap {cap}, len {len}"
            );
        }
    }

    #[test]
    fn nothing_more_is_read_once_the_cap_is_reached() {
        assert!(!output_exhausted(99, 100));
        assert!(output_exhausted(100, 100));
        assert!(output_exhausted(101, 100));
    }
}
