//! The two things every record is stamped with: a fresh id in Modal's
//! `prefix-hex` shape, and the time of day as Unix seconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh random id, e.g. `sb-0123456789abcdef`.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

/// Now, as Unix seconds with a fraction (Modal's `created_at`).
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}
