//! The `local` backend: one OCI container per session on this host, built
//! from standard parts (runc, overlayfs, tini, pasta, nftables).

mod archive;
mod backend;
mod cmd;
mod disk;
pub mod images;
pub mod net;
pub mod oci;
pub mod rootfs;
mod runc;

pub use backend::{LocalBackend, LocalConfig};
