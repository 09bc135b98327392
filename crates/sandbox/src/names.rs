//! Names derived from untrusted ids.
//!
//! A session id comes from the server and must never become a path
//! component, a container name or a cgroup name as it is. Every backend
//! names its sandbox after a hash of the session id instead: lowercase
//! letters, digits and one hyphen, short enough for DNS labels, Kubernetes
//! names and Tensorlake's sandbox names.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Prefix of every sandbox Garrison creates, so `list` by prefix finds them.
pub(crate) const PREFIX: &str = "garrison-";

/// Hex digits of the hash kept in a name: 96 bits, collision-free in practice.
const HASH_HEX_LEN: usize = 24;

/// A backend-safe sandbox name: `garrison-` followed by 24 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SandboxName(String);

impl SandboxName {
    /// The name for a session (stable: the same session always maps to the
    /// same name, so a restarted orchestrator finds its sandbox).
    pub fn for_session(session_id: &str) -> Self {
        Self(format!("{PREFIX}{}", hashed_id(session_id)))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Parses a name made by [`SandboxName::for_session`]; anything else is
    /// refused, so a name read back from a backend can be used as a path.
    pub fn parse(name: &str) -> Option<Self> {
        let hex = name.strip_prefix(PREFIX)?;
        (hex.len() == HASH_HEX_LEN
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(name.to_owned()))
    }
}

/// Ids Garrison generates itself (process names, snapshot ids): letters,
/// digits, `-` and `_`, at most 128. Checked again whenever one is read back,
/// because it becomes a file name.
pub fn is_plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The hex hash of an id, safe as a file name.
pub fn hashed_id(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    hex::encode(digest)[..HASH_HEX_LEN].to_owned()
}

/// The first of `count` slots not in `used`, looking from the one `name`
/// hashes to and wrapping: slots (addresses, id ranges) spread over sandboxes
/// by name without coordination, and a collision takes the next free one.
pub fn free_slot_for(name: &str, used: &BTreeSet<u32>, count: u32) -> Option<u32> {
    let start = u32::from_str_radix(&hashed_id(name)[..8], 16).unwrap_or(0);
    first_free(used, start, count)
}

/// The first of `count` slots not in `used`, from `start` (wrapping).
pub fn first_free(used: &BTreeSet<u32>, start: u32, count: u32) -> Option<u32> {
    let start = start % count.max(1);
    (0..count)
        .map(|step| (start + step) % count)
        .find(|slot| !used.contains(slot))
}

impl fmt::Display for SandboxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for SandboxName {
    type Error = String;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value).ok_or_else(|| format!("not a Garrison sandbox name: {value:?}"))
    }
}

impl From<SandboxName> for String {
    fn from(value: SandboxName) -> Self {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_ids_become_plain_names() {
        for id in ["../../etc", "a/b", "", &"x".repeat(10_000), "devin-\u{0}"] {
            let name = SandboxName::for_session(id);
            assert_eq!(name.as_str().len(), PREFIX.len() + HASH_HEX_LEN);
            assert!(
                name.as_str()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            );
            assert_eq!(SandboxName::parse(name.as_str()), Some(name.clone()));
        }
    }

    #[test]
    fn stable_and_distinct() {
        assert_eq!(
            SandboxName::for_session("devin-1"),
            SandboxName::for_session("devin-1")
        );
        assert_ne!(
            SandboxName::for_session("devin-1"),
            SandboxName::for_session("devin-2")
        );
    }

    #[test]
    fn parse_refuses_foreign_names() {
        assert!(SandboxName::parse("garrison-../../x").is_none());
        assert!(SandboxName::parse("other-0123456789abcdef01234567").is_none());
        assert!(SandboxName::parse("garrison-0123456789ABCDEF01234567").is_none());
    }
}
