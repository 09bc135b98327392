//! The emulator's integration tests, one binary: its HTTP surface, the
//! published Outposts docs rule by rule, and end to end with the real
//! simulator.

mod docs_protocol;
mod http;
mod remote_sim;
