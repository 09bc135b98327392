//! Errors of the fleet client.
//!
//! Every variant names the route template (`"GET /devins/{session_id}"`), never
//! the full URL with a session id in it, so error text is stable enough to be a
//! metrics label. No variant can hold the bearer token: body snippets are
//! scrubbed of it before they are stored.

use std::time::Duration;

use common::Secret;

/// Longest server body kept in an error, in characters.
pub(crate) const MAX_SNIPPET_CHARS: usize = 512;

/// A failed call to the fleet API.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// 401: the token is missing, malformed, expired or revoked.
    #[error("{route}: unauthorized (401): the fleet API refused the token")]
    Unauthorized {
        /// The route called.
        route: &'static str,
    },

    /// 403: the token is valid but lacks a scope.
    #[error("{route}: forbidden (403): the token probably lacks scope {scope_hint}: {body}")]
    Forbidden {
        /// The route called.
        route: &'static str,
        /// The scope this route needs (`account.outposts.machine` or
        /// `account.outposts.orchestrator`).
        scope_hint: &'static str,
        /// What the server said, bounded and scrubbed.
        body: String,
    },

    /// 404 where the caller did not ask for "absent" as a value.
    #[error("{route}: not found (404)")]
    NotFound {
        /// The route called.
        route: &'static str,
    },

    /// 409 where the route has no typed conflict outcome of its own.
    #[error("{route}: conflict (409): {body}")]
    Conflict {
        /// The route called.
        route: &'static str,
        /// What the server said, bounded and scrubbed.
        body: String,
    },

    /// 410 on a list or watch: the server no longer keeps events after the
    /// cursor (or never issued it, e.g. after a server restart). Changes were
    /// missed: list again and watch from the new list's cursor.
    #[error("{route}: cursor expired (410): list again")]
    CursorExpired {
        /// The route called.
        route: &'static str,
    },

    /// Any other non-success status, with a bounded, token-scrubbed body.
    #[error("{route}: HTTP {code}: {body}")]
    Status {
        /// The route called.
        route: &'static str,
        /// The HTTP status.
        code: u16,
        /// What the server said, bounded and scrubbed.
        body: String,
        /// How long the server asked to be left alone (`Retry-After` on a
        /// 429 or 503), capped; callers that try again wait at least this.
        retry_after: Option<std::time::Duration>,
    },

    /// The response (or one SSE line/event) exceeded the configured cap.
    #[error("{route}: response body exceeds {limit} bytes")]
    BodyTooLarge {
        /// The route called.
        route: &'static str,
        /// The cap, in bytes.
        limit: usize,
    },

    /// A request, or a watch stream that went silent, ran out of time.
    #[error("{route}: timed out ({what} after {after:?})")]
    Timeout {
        /// The route called.
        route: &'static str,
        /// What timed out: `"request"` or `"watch idle"`.
        what: &'static str,
        /// How long it waited.
        after: Duration,
    },

    /// Connection refused, reset, DNS or TLS failure, ... The message names
    /// the reason first, then reqwest's whole chain of causes (see
    /// `cause.rs`), which is why `error` is not also its `source()`:
    /// a report walking sources would print the chain twice. The reqwest
    /// error may name the URL; URLs never carry the token.
    #[error("{route}: transport error: {}", crate::cause::describe(error))]
    Transport {
        /// The route called.
        route: &'static str,
        /// What reqwest reported.
        error: reqwest::Error,
    },

    /// The server answered 2xx with a body this client cannot use.
    #[error("{route}: cannot decode response: {message}")]
    Decode {
        /// The route called.
        route: &'static str,
        /// What could not be used.
        message: String,
    },

    /// The server kept saying `has_next_page` past the page cap, or repeated
    /// a cursor.
    #[error("{route}: paging did not end: {message}")]
    Paging {
        /// The route called.
        route: &'static str,
        /// What went wrong.
        message: String,
    },

    /// The caller passed something that cannot be sent (a `..` id, a bad URL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl FleetError {
    /// The server's `Retry-After` carried by a 429 or 503, if it sent one.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short, stable name for the variant, meant as a metrics label.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unauthorized { .. } => "unauthorized",
            Self::Forbidden { .. } => "forbidden",
            Self::NotFound { .. } => "not_found",
            Self::Conflict { .. } => "conflict",
            Self::CursorExpired { .. } => "cursor_expired",
            Self::Status { .. } => "status",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::Timeout { .. } => "timeout",
            Self::Transport { .. } => "transport",
            Self::Decode { .. } => "decode",
            Self::Paging { .. } => "paging",
            Self::InvalidArgument(_) => "invalid_argument",
        }
    }

    /// Whether repeating the same idempotent request may succeed: transport
    /// failures, timeouts, 5xx and 429.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport { .. } | Self::Timeout { .. } => true,
            Self::Status { code, .. } => *code >= 500 || *code == 429,
            _ => false,
        }
    }

    /// The HTTP status the server answered, when there was one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Unauthorized { .. } => Some(401),
            Self::Forbidden { .. } => Some(403),
            Self::NotFound { .. } => Some(404),
            Self::Conflict { .. } => Some(409),
            Self::CursorExpired { .. } => Some(410),
            Self::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Failure of [`crate::FleetClient::claim`].
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// 409: another acceptor holds the claim, or the session is running with
    /// another worker. Normal in a claim race: move on, do not log loudly.
    #[error("claim conflict: another acceptor holds the session")]
    Conflict,
    /// Anything else.
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

impl ClaimError {
    /// Whether another acceptor holds the session.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict)
    }
}

/// Turns a server body into a bounded, single-line-ish string for an error:
/// lossy UTF-8, every occurrence of each secret replaced by `[redacted]`
/// (before truncating, so a cut cannot leave half a token), control
/// characters other than space flattened, at most [`MAX_SNIPPET_CHARS`].
pub(crate) fn snippet(body: &[u8], secrets: &[&Secret]) -> String {
    let mut text = String::from_utf8_lossy(body).into_owned();
    for secret in secrets {
        if !secret.is_empty() {
            text = text.replace(secret.expose(), "[redacted]");
        }
    }
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_SNIPPET_CHARS)
        .collect();
    if text.chars().count() > MAX_SNIPPET_CHARS {
        out.push('…');
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippet_scrubs_secrets_before_truncating() {
        let token = Secret::new("cog_abcdef");
        let mut body = "x".repeat(MAX_SNIPPET_CHARS - 4);
        body.push_str("cog_abcdef and more");
        let s = snippet(body.as_bytes(), &[&token]);
        assert!(!s.contains("cog_"), "{s}");
        assert!(s.chars().count() <= MAX_SNIPPET_CHARS + 1);
    }

    #[test]
    fn snippet_flattens_control_characters_and_bad_utf8() {
        let s = snippet(b"line1\nline2\xff", &[]);
        assert_eq!(s, "line1 line2\u{fffd}");
    }

    #[test]
    fn transient_errors() {
        let e = |code| FleetError::Status {
            route: "r",
            code,
            body: String::new(),
            retry_after: None,
        };
        assert!(e(503).is_transient());
        assert!(e(429).is_transient());
        assert!(!e(400).is_transient());
        assert!(!FleetError::NotFound { route: "r" }.is_transient());
    }
}
