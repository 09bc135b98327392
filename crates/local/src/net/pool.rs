//! The addresses sandboxes' links are carved from and the names of their
//! host-side ends: what the veth pairs and the host's rules agree on.

use std::net::Ipv4Addr;

/// The network every sandbox's `/30` is carved from. Not a setting: a host
/// that already uses it is refused with an error naming the link.
pub const POOL: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 213, 0, 0), 16);
/// Host-side link names start with this, so host rules can match them all.
pub(super) const HOST_IF_PREFIX: &str = "gv";
