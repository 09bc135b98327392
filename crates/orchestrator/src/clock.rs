//! The wall clock as the planner reads it, in one place.

use crate::planner::Millis;

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}
