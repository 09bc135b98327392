//! The sandbox conformance suite against the mock Tensorlake.

use crate::common;

sandbox::conformance_tests!(common::World::start().await.harness());
