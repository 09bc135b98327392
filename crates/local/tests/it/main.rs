//! The `local` backend's integration tests, one binary: real containers,
//! networking and images (root and the test image needed; see `support`).

#[macro_use]
mod support;

mod attacks;
mod backend;
mod bounds;
mod default_image;
mod devices;
mod dns_flood;
mod memory_suspend;
mod net;
mod object_store;
mod policy;
mod reap;
mod sandbox_net;
mod sockets;
mod userns;
