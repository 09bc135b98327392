//! The Modal mock's integration tests, one binary.

mod mock;
