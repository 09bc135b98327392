//! The wall clock as every crate records it: Unix milliseconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, now (0 on a clock set before 1970,
/// which no record of ours can mean).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::now_ms;

    #[test]
    fn now_is_after_this_code_was_written_and_does_not_run_backwards() {
        let first = now_ms();
        // 2026-01-01T00:00:00Z.
        assert!(first > 1_767_225_600_000);
        assert!(now_ms() >= first);
    }
}
