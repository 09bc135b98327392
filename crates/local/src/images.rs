//! Read-only, content-addressed root filesystems shared by all sessions.
//!
//! An image is a directory tree that the `local` backend mounts as the
//! read-only lower layer of every session's overlay. Images come from a
//! [`Recipe`] (`garrison image build`: mmdebstrap plus shell steps) or from
//! an OCI image layout or `docker save` tarball (`garrison image import`).
//!
//! # Layout
//!
//! ```text
//! <state>/images/
//!     store/<id>/rootfs/       the tree; never written once in place
//!     store/<id>/image.json    its Image metadata
//!     names/<name>             a file holding the id the name points at
//!     tmp/<pid>-<random>/      builds and imports in progress
//! ```
//!
//! A build or import happens entirely in `tmp/`, then one `rename` puts the
//! finished `store/<id>` in place and another moves the name: a crash at any
//! moment leaves either no image or a whole one, and `tmp/` leftovers of
//! dead processes are removed by the next [`ImageStore::open`].
//!
//! # Ids
//!
//! An id is `sha256-<hex>` over a canonical description of the content:
//!
//! - an import: the SHA-256 of each layer blob, in order. Layers are
//!   content-addressed already, so importing the same image twice gives the
//!   same id and stores it once.
//! - a build: the recipe's hash ([`Recipe::hash`]) and a digest of the
//!   finished tree (paths, types, modes, owners, file contents and link
//!   targets). The recipe alone is not enough: building the same recipe next
//!   month installs newer packages, and a snapshot taken on last month's
//!   build must keep finding last month's tree.
//!
//! A session records the id it started from, and a snapshot the id it sits
//! on, so moving a name to a new build never changes what an existing
//! session or snapshot sees.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod build;
mod import;
mod info;
mod layer;
pub mod names;
mod progress;
mod store;
mod tree;
pub mod usage;

pub use progress::{NoProgress, Progress};
pub use sandbox::{Recipe, ShellStep};
pub use store::ImageStore;
pub use usage::ImageUsers;

/// The image sessions start from when none is configured.
pub const DEFAULT_IMAGE: &str = "default";

/// Where image metadata is written inside every image's tree.
pub const IMAGE_INFO_PATH: &str = "etc/garrison-image.json";

/// One image in the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Image {
    /// `sha256-<hex>`: the content id (see the module documentation).
    pub id: String,
    /// The name it was resolved by, else the name it was created under.
    pub name: String,
    /// The read-only root filesystem. Sessions never write here: it is the
    /// lower layer of their overlay.
    pub rootfs: PathBuf,
    /// Unix milliseconds.
    pub created_at_ms: i64,
    /// Bytes of file content in the tree (hard links counted once).
    pub size_bytes: u64,
    /// `DEVIN_CHROME_PATH` for sessions on this image, when it has Chromium.
    pub chrome_path: Option<String>,
    /// The image's Xvfb, when it has one: what a desktop runs on. Images
    /// recorded before desktops existed have none.
    #[serde(default)]
    pub xvfb_path: Option<String>,
    /// `recipe:<recipe hash>` or `import:<file name>`.
    pub source: String,
}
