//! The Tensorlake client and backend's integration tests, one binary: each
//! module is one area, run against the mock (`tensorlake-mock`); `common`
//! starts it.

mod common;
mod conformance;
mod images;
mod mock_api;
mod service_answers;
