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
//!
//! # The API, by group
//! - The contract: [`Sandbox`], its specs and handles ([`SandboxSpec`],
//!   [`Handle`], [`ProcessSpec`], [`ProcessRef`], [`SnapshotRef`], ...),
//!   [`SandboxError`], the machine a backend reports ([`MachineInfo`],
//!   [`Capabilities`]) and the session labels ([`session_labels`]).
//! - Lineage: [`Lineage`] (a sandbox's generation, kept in its labels and
//!   copied into its snapshots) and [`next_lineage`].
//! - Names: [`SandboxName`] and the id helpers ([`is_plain_id`],
//!   [`hashed_id`], [`free_slot_for`], [`first_free`]).
//! - Image recipes: [`Recipe`], [`ShellStep`] and their constants
//!   ([`BASE_PACKAGES`], [`CHROMIUM_PATH`], [`XVFB_PATH`]).
//! - Snapshots: [`SnapshotStore`] over a [`SnapshotDir`] or
//!   [`ObjectSnapshots`] ([`ObjectStoreSettings`], [`SnapshotKey`]); the
//!   handles and output files host and local read back from disk
//!   ([`list_handles`], [`read_handle`], [`read_chunk`]).
//! - Namespaces kept as modules, because their items read only with the
//!   module's name before them: [`plugin`] (the [`plugin::BackendPlugin`]
//!   registry and its capabilities [`plugin::deploy`], [`plugin::doctor`],
//!   [`plugin::images`]), [`policy`] (`policy::parse` of a network policy),
//!   [`bounded_output`] (host commands whose output is capped), [`format`]
//!   (the format versions of the records under the state directory).
//! - Behind the `conformance` feature: `conformance` (the suite and
//!   `conformance_tests!`) and `S3Server` (a real S3 server for tests).

use std::collections::BTreeMap;

pub use builtin_recipes::{BUILTIN_RECIPES, BuiltinRecipe, builtin_recipe};
pub use contract::{Sandbox, wait_exit};
pub use error::{Result, SandboxError};
pub use lineage::{LABEL_CREATED_AT_MS, LABEL_GENERATION, Lineage, next_lineage};
pub use machine::{Arch, CHROME_CANDIDATES, Capabilities, DesktopState, MachineInfo};
pub use names::{SandboxName, first_free, free_slot_for, hashed_id, is_plain_id};
pub use on_disk::{list_handles, read_chunk, read_handle};
pub use os::Os;
pub use recipe::{BASE_PACKAGES, CHROMIUM_PATH, Recipe, ShellStep, XVFB_PATH};
#[cfg(feature = "conformance")]
pub use s3_support::S3Server;
pub use snapshot_dir::SnapshotDir;
pub use snapshot_store::{
    Fetched, ObjectSnapshots, ObjectStoreSettings, PART_SIZE, SnapshotKey, SnapshotStore, check_url,
};
pub use spec::{
    Handle, NetworkSpec, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Resources,
    SandboxSpec, SnapshotRef,
};

// Namespaces by design (see the crate docs): `policy::parse`,
// `bounded_output::output` or `plugin::doctor::Kind` would say nothing at
// the crate root, nor would `format::SANDBOX_HANDLE`'s constants.
pub mod bounded_output;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod format;
pub mod plugin;
pub mod policy;

mod builtin_recipes;
mod contract;
mod error;
mod lineage;
mod machine;
mod names;
mod on_disk;
mod os;
mod recipe;
#[cfg(feature = "conformance")]
mod s3_support;
mod snapshot_dir;
mod snapshot_store;
mod spec;

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
