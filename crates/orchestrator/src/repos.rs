//! Repositories cloned into a fresh sandbox before the remote starts
//! (`REPOS`, with `GIT_USERNAME` and `GIT_TOKEN` for private ones).
//!
//! Only a sandbox created fresh is cloned into: one restored from a snapshot
//! has the repositories in its workspace already.
//!
//! The URLs are checked (and named a directory) in `repos/urls.rs`; how the
//! credentials reach git and nothing else is in `repos/credentials.rs`;
//! the host's mirror of each repository, fetched at most once a minute
//! however many sessions start, in `repos/mirror.rs`; cloning from it on
//! Garrison's side and copying the clone into the sandbox (so the token
//! never enters it) in `repos/clone.rs`.
//! The plan that ties a list of URLs to directories is in `repos/plan.rs`.

mod clone;
mod credentials;
mod git;
mod layout;
mod mirror;
mod plan;
mod urls;

pub(crate) use clone::run_to_end;
pub(crate) use clone::{CloneInto, clone_one};
pub(crate) use layout::{LEGACY_PROBE, remote_cwd};
pub(crate) use mirror::Mirrors;
pub(crate) use plan::plan;
pub use plan::{GIT_TOKEN_ENV, Repos};
pub(crate) use urls::validate_url;
