//! Tensorlake sandboxes for Garrison.
//!
//! - [`TensorlakePlugin`] / [`PLUGIN`]: what the backend registry lists,
//!   with its settings ([`TensorlakeSettings`], [`resolve_settings`]) and its
//!   CLI capabilities.
//! - [`Client`]: the lifecycle API (`/sandboxes`, `/snapshots`: create, get,
//!   list, suspend, resume, snapshot, delete), with its [`RetryPolicy`] and
//!   [`Error`]; [`models`]: the wire shapes it sends and receives.
//! - [`SandboxClient`]: one sandbox's data-plane API (`/api/v1/processes`,
//!   `/api/v1/files`, `/api/v1/pty`), reached through the sandbox proxy;
//!   [`ProcessKey`] names a process there and [`PtyEvent`] is what a PTY
//!   websocket yields.
//! - [`TensorlakeBackend`] (with [`TensorlakeConfig`]): the
//!   [`sandbox::Sandbox`] implementation; [`output_log_of`] and
//!   [`OUTPUT_LOG`] say where a sandbox's process output is kept.
//! - [`ImageCatalog`]: the sandbox-image catalog on [`IMAGE_SERVICE_PATH`]
//!   (register a snapshot as a named image, list, find, delete), and [`build_image`] (with
//!   [`BuildRequest`], [`DEFAULT_STEP_PATH`]): a Garrison recipe built into
//!   such an image in a builder sandbox.
//!
//! The wire shapes follow Tensorlake's published SDKs (read, not copied):
//! `crates/cloud-sdk/src/sandboxes/{mod,models}.rs`,
//! `src/tensorlake/sandbox/{models,pty,_defaults}.py` and
//! `typescript/src/sandbox.ts` in <https://github.com/tensorlakeai/tensorlake>,
//! and the retry policy in `src/retry.rs` of the `tensorlake` crate
//! (<https://docs.rs/crate/tensorlake/latest/source/src/retry.rs>).

mod backend;
mod catalog;
mod client;
mod dataplane;
mod deploy;
mod doctor;
mod error;
mod follow;
mod http;
mod image_build;
mod image_service;
pub mod models;
mod plugin;
mod policy;
mod pty;
mod retry;
mod settings;
mod sse;
mod timestamp;
mod urls;

pub use backend::{OUTPUT_LOG, TensorlakeBackend, TensorlakeConfig, output_log_of};
pub use catalog::{IMAGE_SERVICE_PATH, ImageCatalog};
pub use client::{Client, DEFAULT_API_URL, LifecycleChange};
pub use common::Secret;
pub use dataplane::{ProcessKey, SandboxClient};
pub use error::{Error, Result};
pub use image_build::{BuildRequest, DEFAULT_STEP_PATH, build_image};
pub use plugin::{PLUGIN, TensorlakePlugin};
pub use pty::PtyEvent;
pub use retry::RetryPolicy;
pub use settings::{TensorlakeSettings, resolve as resolve_settings};
