//! The sandbox conformance suite against the Modal backend and the mock.

use crate::common;

sandbox::conformance_tests!(common::start(|_| {}).await.harness());
