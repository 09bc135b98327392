//! The `local` backend: one OCI container per session on this host, built
//! from standard parts (runc, overlayfs, tini, a veth pair and nftables).

mod archive;
mod backend;
mod cmd;
mod disk;
mod idmap;
pub mod images;
pub mod net;
pub mod oci;
mod plugin;
mod reaper;
pub mod rootfs;
mod runc;
pub mod seccomp;
pub mod userns;

pub use backend::{DESKTOP_DISPLAY, LocalBackend, LocalConfig};
pub use plugin::{LocalPlugin, PLUGIN, STATIC_SHIM_ENV, USERNS_ENV};
