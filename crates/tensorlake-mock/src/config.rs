//! How the mock is set up ([`MockConfig`]) and the failures it can be told
//! to answer ([`Fault`], [`CreateOutcome`]).

use std::path::PathBuf;
use std::time::Duration;

/// How the mock behaves.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// The only bearer token accepted.
    pub api_key: String,
    /// Holds `sandboxes/<id>/` and `snapshots/`.
    pub root: PathBuf,
    /// How long `pending` and `suspending` last.
    pub transition: Duration,
    /// Suspend named sandboxes left idle (no data-plane request) for their
    /// `timeout_secs`.
    pub idle_suspend: bool,
}

impl MockConfig {
    /// Accepts `api_key` and keeps its files under `root`; transitions take
    /// 30 ms and idle sandboxes are never suspended.
    pub fn new(api_key: impl Into<String>, root: impl Into<PathBuf>) -> Self {
        Self {
            api_key: api_key.into(),
            root: root.into(),
            transition: Duration::from_millis(30),
            idle_suspend: false,
        }
    }
}

/// An error the mock answers instead of handling a request.
///
/// Tests set one with [`MockTensorlake::inject`] or, against a
/// `garrison mock tensorlake` process, by `POST /_mock/faults` with this
/// as JSON, e.g. `{"path_prefix": "/api/v1/processes", "status": 502,
/// "code": "SANDBOX_UPSTREAM_ERROR", "times": 2}`. The proxy codes the
/// service answers are `SANDBOX_UPSTREAM_ERROR`, `SANDBOX_NOT_READY`,
/// `SANDBOX_UNREACHABLE` and `AUTH_SERVICE_UNAVAILABLE`; a 429 with
/// `retry_after_secs` carries a `Retry-After` header.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Fault {
    /// `GET`, `POST`... or `None` for any.
    #[serde(default)]
    pub method: Option<String>,
    /// Requests whose path starts with this.
    pub path_prefix: String,
    /// The HTTP status answered.
    pub status: u16,
    /// Tensorlake error code for the body.
    #[serde(default)]
    pub code: Option<String>,
    /// How many requests fail before the next succeed.
    pub times: usize,
    /// Sent as `Retry-After` (seconds).
    #[serde(default)]
    pub retry_after_secs: Option<u64>,
}

/// What a create (`POST /sandboxes`) answers instead of waiting for the
/// sandbox to run, as the service does under capacity pressure or a failed
/// start. Queued with [`MockTensorlake::next_create`] or, against a
/// `garrison mock tensorlake` process, by `POST /_mock/create_outcomes`
/// with this as JSON: `{"timeout": {"pending_ms": 500}}` or `"failed"`.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreateOutcome {
    /// 504 `{"status": "timeout", "sandbox_id": ...}`: the sandbox stays
    /// `pending` for `pending_ms`, then runs.
    Timeout {
        /// How long the sandbox stays `pending`, in milliseconds.
        pending_ms: u64,
    },
    /// 422 `{"status": "failed", "sandbox_id": ...}`: the sandbox is
    /// `failed` and never runs.
    Failed,
}
