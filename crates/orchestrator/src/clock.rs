//! The wall clock as the planner reads it, in one place.

/// Unix milliseconds now (one clock for the whole workspace).
pub(crate) use common::now_ms;
