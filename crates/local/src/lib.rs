//! The `local` backend: one OCI container per session on this host, built
//! from standard parts (runc or gVisor's runsc, overlayfs, tini, a veth
//! pair and nftables).

mod archive;
mod backend;
pub mod cdi;
mod cmd;
mod compat;
mod disk;
mod idmap;
pub mod images;
mod memory_suspend;
pub mod net;
pub mod oci;
mod plugin;
mod prerequisites;
mod reaper;
pub mod rootfs;
mod runc;
mod seccomp;
pub mod userns;

pub use backend::{DESKTOP_DISPLAY, LocalBackend, LocalConfig};
pub use memory_suspend::{HOSTINET_REFUSAL, unavailable_reason as memory_suspend_unavailable};
pub use plugin::{
    CDI_SPEC_DIRS_ENV, CDI_SPEC_DIRS_KEY, DEVICES_ENV, DEVICES_KEY, LocalPlugin, PLUGIN,
    RUNTIME_ENV, RUNTIME_KEY, STATIC_SHIM_ENV, configured_runtime,
};
pub use prerequisites::{
    default_image, find_program, prerequisites, seccomp_check, static_shim_path,
};
pub use runc::Runtime;
pub use userns::USERNS_ENV;
