//! The sandbox conformance suite against the mock Tensorlake.

mod common;

sandbox::conformance_tests!(common::World::start().await.harness());
