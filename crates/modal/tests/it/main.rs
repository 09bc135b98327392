//! The Modal backend's integration tests, one binary: each module is one
//! area, run against the mock (`modal-mock`); `common` starts it.

mod backend;
mod common;
mod conformance;
mod image;
mod memory;
mod router;
mod secret;
