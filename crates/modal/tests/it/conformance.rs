//! The sandbox conformance suite against the Modal backend and the mock.

mod common;

sandbox::conformance_tests!(common::start(|_| {}).await.harness());
