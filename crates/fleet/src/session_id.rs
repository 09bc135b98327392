//! A Devin session's id: [`SessionId`], checked where it enters (the
//! fleet API's JSON, or [`SessionId::new`]), so code holding one never
//! checks it again.
//!
//! An id is never a raw path component: ids are percent-encoded in URLs,
//! and whatever names a file or sandbox after a session hashes the id
//! first (`sandbox::SandboxName::for_session(id.as_str())`). The type
//! therefore offers the id as text ([`SessionId::as_str`]), never as a
//! path.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest session id accepted from the server. Real ids are ~40 characters.
pub const MAX_SESSION_ID_LEN: usize = 256;

/// A session id that passed [`validate_session_id`]. On the wire it is the
/// plain string it always was.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

impl SessionId {
    /// Checks `id` (see [`validate_session_id`]).
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidEntry> {
        let id = id.into();
        validate_session_id(&id)?;
        Ok(Self(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl TryFrom<String> for SessionId {
    type Error = InvalidEntry;

    fn try_from(id: String) -> Result<Self, InvalidEntry> {
        Self::new(id)
    }
}

impl TryFrom<&str> for SessionId {
    type Error = InvalidEntry;

    fn try_from(id: &str) -> Result<Self, InvalidEntry> {
        Self::new(id)
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> Self {
        id.0
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

// Sound because the derived `Eq`, `Ord` and `Hash` are those of the one
// `String` field, which agree with `str`'s: maps keyed by id can be looked
// up with the text a wire entry or a label carries.
impl Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Why a server value was refused at the boundary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEntry {
    #[error("session id is empty")]
    /// Empty.
    EmptySessionId,
    #[error("session id is {0} bytes long (limit {MAX_SESSION_ID_LEN})")]
    /// Longer than [`MAX_SESSION_ID_LEN`] bytes.
    SessionIdTooLong(usize),
    #[error("session id contains a control character")]
    /// Holds a control character.
    SessionIdControlChar,
}

/// Accepts any id the server may reasonably send (ids are percent-encoded in
/// URLs and hashed before they name a file), but refuses empty, oversized and
/// control-character ids that could only be an attack or a bug.
pub fn validate_session_id(id: &str) -> Result<(), InvalidEntry> {
    if id.is_empty() {
        return Err(InvalidEntry::EmptySessionId);
    }
    if id.len() > MAX_SESSION_ID_LEN {
        return Err(InvalidEntry::SessionIdTooLong(id.len()));
    }
    if id.chars().any(char::is_control) {
        return Err(InvalidEntry::SessionIdControlChar);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_is_checked_where_it_is_read_and_written_as_it_was() {
        let id: SessionId = serde_json::from_str("\"devin-1\"").unwrap();
        assert_eq!(id, "devin-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"devin-1\"");
        let empty = serde_json::from_str::<SessionId>("\"\"").unwrap_err();
        assert!(
            empty.to_string().starts_with("session id is empty"),
            "{empty}"
        );
        assert_eq!(
            SessionId::new("a\nb"),
            Err(InvalidEntry::SessionIdControlChar)
        );
    }
}
