//! The `host` backend's integration tests, one binary: the conformance
//! suite, snapshots kept in a real S3-compatible server, and the formats
//! of the records the backend keeps.

mod conformance;
mod formats;
mod object_store;
