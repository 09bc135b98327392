#![warn(missing_docs)]
//! The Modal backend: Garrison sessions in Modal Sandboxes.
//!
//! [`client`] talks gRPC to Modal (`modal.client.ModalClient`), [`wire`]
//! holds everything tied to Modal's wire format, [`backend`] implements
//! [`sandbox::Sandbox`] on top, and [`image`] builds the session image on
//! Modal from the same recipe the local backend uses.

pub mod backend;
pub mod client;
mod deploy;
mod doctor;
pub mod exec;
pub mod image;
mod image_service;
mod plugin;
pub mod policy;
pub mod router;
pub mod scripts;
pub mod secret;
pub mod settings;
pub mod wire;

pub use backend::{ModalBackend, ModalSettings, Runtime, app_name_for};
pub use client::{Client, ClientConfig, Credentials, RetryPolicy};
pub use plugin::{ModalPlugin, PLUGIN};
pub use settings::ModalEnv;
