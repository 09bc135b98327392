//! Tensorlake sandboxes for Garrison.
//!
//! - [`Client`]: the lifecycle API (`/sandboxes`, `/snapshots`: create, get,
//!   list, suspend, resume, snapshot, delete).
//! - [`SandboxClient`]: one sandbox's data-plane API (`/api/v1/processes`,
//!   `/api/v1/files`, `/api/v1/pty`), reached through the sandbox proxy.
//! - [`pty`]: the PTY websocket and its binary frame format.
//! - [`backend::TensorlakeBackend`]: the [`sandbox::Sandbox`] implementation.
//! - [`catalog::ImageCatalog`]: the sandbox-image catalog (register a
//!   snapshot as a named image, list, find, delete), and
//!   [`image_build`]: a Garrison recipe built into such an image in a
//!   builder sandbox.
//!
//! The wire shapes follow Tensorlake's published SDKs (read, not copied):
//! `crates/cloud-sdk/src/sandboxes/{mod,models}.rs`,
//! `src/tensorlake/sandbox/{models,pty,_defaults}.py` and
//! `typescript/src/sandbox.ts` in <https://github.com/tensorlakeai/tensorlake>,
//! and the retry policy in `src/retry.rs` of the `tensorlake` crate
//! (<https://docs.rs/crate/tensorlake/latest/source/src/retry.rs>).

pub mod backend;
pub mod catalog;
mod client;
pub mod dataplane;
mod deploy;
mod doctor;
mod error;
pub mod follow;
mod http;
pub mod image_build;
mod image_service;
pub mod models;
mod plugin;
pub mod policy;
pub mod pty;
pub mod retry;
pub mod settings;
mod sse;
pub mod timestamp;
pub mod urls;

pub use backend::{TensorlakeBackend, TensorlakeConfig};
pub use client::{Client, DEFAULT_API_URL, LifecycleChange};
pub use common::Secret;
pub use dataplane::SandboxClient;
pub use error::{Error, Result};
pub use plugin::{PLUGIN, TensorlakePlugin};
pub use settings::TensorlakeSettings;
