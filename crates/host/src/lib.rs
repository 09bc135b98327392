//! The `host` backend: a directory and a process group per session, no
//! isolation.
//!
//! Meant for a trusted single-user machine, the way `devin worker start`
//! runs a worker: the agent can read everything the Garrison user can. Each
//! sandbox is a directory:
//!
//! ```text
//! <root>/sandboxes/<name>/
//!     handle.json        the Handle, so `list` finds leftovers
//!     fs/workspace/      the remote's working directory (repositories)
//!     fs/state/          DEVIN_REMOTE_STATE_DIR
//!     fs/bin/            binaries put in by the orchestrator
//!     fs/home/           HOME
//!     proc/<id>/         one per process: shim.pid, child.pid, output.log, exit
//! <root>/executables/<sha256>
//!                        one copy of each executable, hard-linked into the
//!                        sandboxes (see `executables`)
//! ```
//!
//! A snapshot is a zstd-compressed tar of `fs/`, kept in the snapshot
//! directory (which several Garrison processes may share) or an object
//! store (see [`sandbox::SnapshotStore`]).

mod archive;
mod backend;
mod executables;
mod files;
mod machine;
mod plugin;
mod processes;

pub use backend::{HostBackend, HostConfig};
pub use plugin::{HostPlugin, PLUGIN};
