//! Everything that depends on the shape of Modal's API: the generated gRPC
//! code, the client version Garrison claims to be, the request metadata and
//! which status codes are worth retrying.
//!
//! Modal documents this API as unsupported and changing, so nothing outside
//! this module names a header or a version, and `proto/modal_api.proto` is
//! updated together with [`CLIENT_VERSION`].

#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("modal.client");

/// The router's messages name `modal.client` types as `super::client::...`.
#[doc(hidden)]
pub mod client {
    pub use super::{NetworkAccess, SecretSource};
}

/// The task command router (`modal.task_command_router`): processes,
/// snapshots and network changes of one running task.
pub mod router {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("modal.task_command_router");
}

/// The Modal Python SDK version whose protocol Garrison speaks. Modal's
/// server refuses clients it considers too old, so this is what to raise
/// (after checking the messages in `modal_api.proto` still match) when it
/// does. Modal's own Go and JS SDKs announce themselves the same way.
pub const CLIENT_VERSION: &str = "1.0.0";

/// `x-modal-client-type`: Garrison is neither Modal's Python, Go nor JS SDK;
/// it speaks the protocol of the Python client at [`CLIENT_VERSION`].
pub const CLIENT_TYPE: ClientType = ClientType::Client;

pub const HEADER_TOKEN_ID: &str = "x-modal-token-id";
pub const HEADER_TOKEN_SECRET: &str = "x-modal-token-secret";
pub const HEADER_CLIENT_VERSION: &str = "x-modal-client-version";
pub const HEADER_CLIENT_TYPE: &str = "x-modal-client-type";

/// The builder version Garrison's image recipes are written against.
pub const IMAGE_BUILDER_VERSION: &str = "2025.06";

/// The status codes Modal's own clients retry with backoff.
/// Retryable for calls that make something (a sandbox, an exec, a
/// snapshot): only a code that says the request was not acted on, since a
/// repeat of one that was would make a second.
pub fn is_retryable_unapplied(code: tonic::Code) -> bool {
    code == tonic::Code::Unavailable
}

pub fn is_retryable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::DeadlineExceeded
            | tonic::Code::Unavailable
            | tonic::Code::Cancelled
            | tonic::Code::Internal
            | tonic::Code::Unknown
    )
}
