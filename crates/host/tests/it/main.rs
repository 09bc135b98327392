//! The `host` backend's integration tests, one binary: the conformance
//! suite, and snapshots kept in a real S3-compatible server.

mod conformance;
mod object_store;
