//! The fleet client against the in-process emulator, in one test binary:
//! one test (or more) per row of `docs/outposts-protocol.md`, and the
//! protocol's conformance, point by point (`protocol`). Everything talks to
//! 127.0.0.1 only.

mod auth;
mod claims;
mod common;
mod outposts;
mod pkce;
mod protocol;
mod queue;
mod watch;
