//! The `local` backend: one OCI container per session on this host, built
//! from standard parts (runc, overlayfs, tini, pasta, nftables).

pub mod images;
pub mod net;
