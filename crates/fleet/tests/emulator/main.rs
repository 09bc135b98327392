//! The fleet client against the in-process emulator, one test (or more) per
//! row of `docs/outposts-protocol.md`. Everything talks to 127.0.0.1 only.

mod auth;
mod claims;
mod common;
mod outposts;
mod pkce;
mod queue;
mod watch;
