//! The errors every backend maps its failures onto.

/// Errors every backend maps its failures onto, so the orchestrator can
/// decide without knowing the backend.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox, process or snapshot no longer exists.
    #[error("gone: {0}")]
    Gone(String),
    /// Worth retrying later: a timeout, a rate limit, a busy backend.
    #[error("transient: {0:#}")]
    Transient(anyhow::Error),
    /// Retrying will not help: a bad spec, a missing prerequisite.
    #[error("{0:#}")]
    Fatal(anyhow::Error),
    /// The operation named does not exist on this backend.
    #[error("{0} is not supported by this backend")]
    Unsupported(&'static str),
    /// A snapshot failed its integrity check (its content hash, its
    /// decryption): it is kept untouched for inspection.
    #[error("{0}")]
    Corrupt(String),
    /// A snapshot that is intact but cannot be restored, for a reason
    /// retrying cannot mend (a path deeper than the host's `PATH_MAX`, an
    /// unpack that outlasts its time bound): it is kept untouched for the
    /// operator. The text is bounded.
    #[error("{0}")]
    Unrestorable(String),
}

impl SandboxError {
    /// Whether the thing asked about no longer exists.
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Gone(_))
    }
    /// Whether retrying later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
    /// Whether a snapshot failed its integrity check.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Self::Corrupt(_))
    }
    /// Whether a snapshot is intact but cannot be restored.
    pub fn is_unrestorable(&self) -> bool {
        matches!(self, Self::Unrestorable(_))
    }
}

/// A result of a backend operation.
pub type Result<T, E = SandboxError> = std::result::Result<T, E>;
