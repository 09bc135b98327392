#![warn(missing_docs)]
//! The Modal backend: Garrison sessions in Modal Sandboxes.
//!
//! - [`ModalPlugin`] / [`PLUGIN`]: what the backend registry lists, with
//!   its settings ([`ModalEnv`]) and its CLI capabilities.
//! - [`ModalBackend`] (with [`ModalSettings`], [`Runtime`]): the
//!   [`sandbox::Sandbox`] implementation.
//! - [`Client`] (with [`ClientConfig`], [`Credentials`], [`RetryPolicy`],
//!   [`Rpc`]): gRPC to Modal (`modal.client.ModalClient`).
//! - [`wire`]: everything tied to Modal's wire format (the generated
//!   protobuf types and the headers).
//! - [`exec`]: commands run in a sandbox's container; [`secret`]: Modal
//!   Secrets; [`image`]: the session image built on Modal from the same
//!   recipe the local backend uses.

mod backend;
mod client;
mod deploy;
mod doctor;
pub mod exec;
pub mod image;
mod image_service;
mod plugin;
mod policy;
mod router;
mod scripts;
pub mod secret;
mod settings;
pub mod wire;

pub use backend::{ModalBackend, ModalSettings, Runtime, app_name_for};
pub use client::{Client, ClientConfig, Credentials, RetryPolicy, Rpc};
pub use plugin::{ModalPlugin, PLUGIN};
pub use settings::ModalEnv;
