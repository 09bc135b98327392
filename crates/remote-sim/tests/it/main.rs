//! The simulator's integration tests, one binary: its command line, a
//! tiny gateway written in the test, and the project's emulator; `common`
//! runs the built simulator.

mod cli;
mod common;
mod emulator;
mod fake_gateway;
