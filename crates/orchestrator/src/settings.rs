//! Where `garrison serve` gets its settings, and how they are checked.
//!
//! Three layers, highest first: command-line flags, the environment, and a
//! TOML file; below them, built-in defaults. Each layer is read into a
//! [`RawSettings`], whose fields are all optional and tagged with their
//! [`Origin`], so merging is `flags.or(env).or(file)` and an error can name
//! the exact flag, variable or file key that was wrong. [`resolve`] turns the
//! merged layer into a validated [`ServeConfig`].
//!
//! The names follow `devin worker start` and the seed orchestrators
//! (`OUTPOST_ID`, `MAX_CONCURRENT_SESSIONS`, `SANDBOX_CPUS`, ...) so their
//! users feel at home; they are listed once, in [`names`]. A backend's own
//! settings are its own: each backend's plug-in
//! ([`sandbox::plugin::BackendPlugin`]) names, reads and validates them,
//! and declares the keys of the file it reads, so this module never names a
//! backend.
//!
//! The token never comes from a flag, because argv is visible to every user
//! of the machine: it is read from `DEVIN_OUTPOSTS_TOKEN`, else from the
//! credentials file that `garrison connect` writes ([`save_credentials`]).
//!
//! Nothing here reads the process environment except [`HostEnv::current`]
//! and [`credentials_path`]: the logic takes a [`HostEnv`], so tests pass a
//! map instead of mutating global state.
//!
//! One file per concern: [`names`] (the table of every setting: its
//! spellings, values, default and help), [`example`] (the example file,
//! written from the tables), [`host`]
//! (the user, the environment and the default directories), [`layer`] (one
//! layer and how layers merge), [`file`] (`garrison.toml`), [`credentials`]
//! (what `garrison connect` saves), [`resolve`] (layers to a
//! [`ServeConfig`]), [`validate`] (each value's checks) and [`resolved`]
//! (the validated types).

mod credentials;
mod example;
mod file;
mod host;
mod layer;
pub mod names;
mod resolve;
pub mod resolved;
mod validate;

pub use common::settings::{Origin, SettingsError, Sourced};
pub use credentials::{Credentials, load_credentials, save_credentials};
pub use example::example_file;
pub use file::{load_file, parse_file};
pub use host::{HostEnv, credentials_path};
pub use layer::{OutpostTable, RawSettings};
pub use names::Setting;
pub use resolve::{BackendSource, resolve, resolve_process};
pub use resolved::*;
pub use validate::Backends;

#[cfg(test)]
mod tests;
