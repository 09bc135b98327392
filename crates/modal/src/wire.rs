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
/// One per logical call, the same on its retries (Modal's client sends it
/// on every call).
pub const HEADER_IDEMPOTENCY_KEY: &str = "x-idempotency-key";
/// 0 on the first attempt of a call, then 1, 2, ...
pub const HEADER_RETRY_ATTEMPT: &str = "x-retry-attempt";
/// A warning for the user, percent-encoded, in an answer's trailers.
pub const HEADER_WARNING: &str = "x-modal-warning";

/// The builder version Garrison's image recipes are written against.
pub const IMAGE_BUILDER_VERSION: &str = "2025.06";

/// Whether a call that makes something (a sandbox, an exec, a snapshot)
/// may be repeated after failing with `code`. Every call carries an
/// `x-idempotency-key` that stays the same on its retries, so Modal
/// recognises a repeat of one it acted on (the official client retries its
/// creating calls the same way); on top of the transient codes, a
/// RESOURCE_EXHAUSTED (rate limit, capacity) is worth waiting out.
pub fn is_retryable_creation(code: tonic::Code) -> bool {
    is_retryable(code) || code == tonic::Code::ResourceExhausted
}

/// The status codes Modal's own clients retry with backoff.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creations_are_retried_on_transient_codes_and_rate_limits_only() {
        for code in [
            tonic::Code::Unavailable,
            tonic::Code::ResourceExhausted,
            tonic::Code::DeadlineExceeded,
            tonic::Code::Internal,
        ] {
            assert!(is_retryable_creation(code), "{code:?}");
        }
        for code in [
            tonic::Code::InvalidArgument,
            tonic::Code::NotFound,
            tonic::Code::AlreadyExists,
            tonic::Code::Unauthenticated,
            tonic::Code::FailedPrecondition,
        ] {
            assert!(!is_retryable_creation(code), "{code:?}");
        }
    }
}
