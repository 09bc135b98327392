//! Errors of the Tensorlake client.

/// What went wrong talking to Tensorlake. Never carries the API key.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a non-success status.
    #[error("Tensorlake answered {status}{}: {message}", code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Api {
        /// The HTTP status.
        status: u16,
        /// Tensorlake's error code from the body (`"code"`), if any.
        code: Option<String>,
        /// The body's message (or the body itself), cut at 2048 characters.
        message: String,
    },
    /// The request never got an answer (connect, reset, timeout).
    #[error("Tensorlake request failed: {0}")]
    Transport(String),
    /// The answer was not what the API documents.
    #[error("unexpected answer from Tensorlake: {0}")]
    Decode(String),
    /// The answer was larger than the client accepts.
    #[error("Tensorlake's answer exceeded {limit} bytes ({what})")]
    TooLarge {
        /// Which answer.
        what: &'static str,
        /// The bound, in bytes.
        limit: usize,
    },
    /// A value the caller gave cannot be sent (a bad URL, an empty name).
    #[error("{0}")]
    Invalid(String),
    /// The PTY websocket failed.
    #[error("PTY websocket: {0}")]
    WebSocket(String),
}

impl Error {
    /// The HTTP status of an [`Error::Api`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// A 409.
    pub fn is_conflict(&self) -> bool {
        self.status() == Some(409)
    }

    /// Worth trying again later (after the client's own retries).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Api { status, .. } => matches!(status, 408 | 409 | 429 | 500..=599),
            Self::Transport(_) | Self::WebSocket(_) => true,
            _ => false,
        }
    }

    pub(crate) fn transport(e: reqwest::Error) -> Self {
        // reqwest's message names the URL (never the key: it travels in a
        // header); strip the query anyway, it may hold a PTY token.
        Self::Transport(e.without_url().to_string())
    }
}

/// A result of the Tensorlake client.
pub type Result<T, E = Error> = std::result::Result<T, E>;
