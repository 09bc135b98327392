//! Sandboxes: the one trait every backend implements, what backends share
//! (plug-in registry, network policy, names, image recipes, snapshot stores)
//! and, behind the `conformance` feature, the suite every backend must pass.
//! The backends are crates of their own (`host`, `local`, `modal`,
//! `tensorlake`).
//!
//! A backend knows nothing about Devin. The orchestrator asks it for an
//! isolated machine ([`Sandbox::create`]), puts files in, spawns a detached
//! process, watches it, snapshots the machine's filesystem and destroys it.
//! Everything a backend hands back ([`Handle`], [`ProcessRef`],
//! [`SnapshotRef`]) is plain serializable data, so the orchestrator can write
//! it to its state store and pick up the same sandbox after a restart.

use std::collections::BTreeMap;

pub use contract::{Sandbox, wait_exit};
pub use error::{Result, SandboxError};
pub use machine::{Arch, CHROME_CANDIDATES, Capabilities, MachineInfo};
pub use os::Os;
pub use spec::{
    Handle, NetworkSpec, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Resources,
    SandboxSpec, SnapshotRef,
};

pub mod bounded_output;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod contract;
mod error;
mod machine;
pub mod names;
pub mod on_disk;
mod os;
pub mod plugin;
pub mod policy;
pub mod recipe;
#[cfg(feature = "conformance")]
pub mod s3_support;
pub mod snapshot_dir;
pub mod snapshot_store;
mod spec;

pub use names::SandboxName;
pub use recipe::Recipe;

/// Label keys every backend stores with a sandbox, so `list` can map a
/// leftover sandbox back to its session.
pub const LABEL_SESSION_ID: &str = "garrison.session_id";
/// See [`LABEL_SESSION_ID`]: the outpost the session belongs to.
pub const LABEL_OUTPOST_ID: &str = "garrison.outpost_id";
/// The acceptor id of the Garrison that made the sandbox: on a cloud
/// account several Garrisons share, each cleans up only its own orphans.
pub const LABEL_ACCEPTOR_ID: &str = "garrison.acceptor_id";

/// Labels for a session's sandbox.
pub fn session_labels(session_id: &str, outpost_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_SESSION_ID.to_owned(), session_id.to_owned()),
        (LABEL_OUTPOST_ID.to_owned(), outpost_id.to_owned()),
    ])
}
