//! Repositories cloned into a fresh sandbox before the remote starts
//! (`REPOS`, with `GIT_USERNAME` and `GIT_TOKEN` for private ones).
//!
//! Only a sandbox created fresh is cloned into: one restored from a snapshot
//! has the repositories in its workspace already.
//!
//! The URLs are checked (and named a directory) in `repos/urls.rs`; how the
//! credentials reach the clone command and nothing else is in
//! `repos/credentials.rs`; cloning on Garrison's side and copying the clone
//! into the sandbox (so the token never enters it) in `repos/clone.rs`.
//! The plan that ties a list of URLs to directories is in `repos/plan.rs`.

mod clone;
mod credentials;
mod layout;
mod plan;
mod urls;

pub use clone::clone_one;
pub(crate) use clone::run_to_end;
pub use credentials::{check_config, clone_argv, clone_env};
pub use layout::{LEGACY_PROBE, LEGACY_REPOS_DIR, remote_cwd};
pub use plan::{DEFAULT_GIT_USERNAME, GIT_TOKEN_ENV, GIT_USERNAME_ENV, PlannedClone, Repos, plan};
pub use urls::{dir_name, validate_url};
