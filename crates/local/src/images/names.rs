//! Image names and ids: the only user strings that become path components
//! in the image store, so both are checked against a strict shape first.

use anyhow::bail;

/// Prefix of every image id.
pub const ID_PREFIX: &str = "sha256-";

/// Hex digits a shortened id must keep to be accepted as a prefix: 48 bits,
/// enough to be unique among the handful of images one host holds.
pub const MIN_SHORT_ID_HEX: usize = 12;

/// Checks an image name: `[a-z0-9][a-z0-9._-]{0,63}`. The shape keeps names
/// usable as file names (no `/`, no leading `.`, so never `.` or `..`).
pub fn validate_name(name: &str) -> anyhow::Result<()> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 64
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes.iter().all(|&b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
    if !ok {
        bail!(
            "invalid image name {name:?}: use 1 to 64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit"
        );
    }
    Ok(())
}

/// Checks a full image id: `sha256-` and 64 lowercase hex digits.
pub fn validate_id(id: &str) -> anyhow::Result<()> {
    match id.strip_prefix(ID_PREFIX) {
        Some(hex) if hex.len() == 64 && is_lower_hex(hex) => Ok(()),
        _ => bail!("invalid image id {id:?}: expected {ID_PREFIX}<64 lowercase hex digits>"),
    }
}

/// Whether `text` looks like an id or an id prefix (`sha256-` and at least
/// [`MIN_SHORT_ID_HEX`] hex digits) rather than a name.
pub fn is_id_like(text: &str) -> bool {
    text.strip_prefix(ID_PREFIX)
        .is_some_and(|hex| hex.len() >= MIN_SHORT_ID_HEX && hex.len() <= 64 && is_lower_hex(hex))
}

/// The id as `ls` shows it: the prefix and 12 hex digits.
pub fn short_id(id: &str) -> &str {
    let end = (ID_PREFIX.len() + MIN_SHORT_ID_HEX).min(id.len());
    &id[..end]
}

/// The id for a SHA-256 digest.
pub fn id_from_digest(digest: &[u8]) -> String {
    format!("{ID_PREFIX}{}", hex::encode(digest))
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["default", "a", "0", "deb-12.1_x", &"a".repeat(64)] {
            validate_name(good).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "-x",
            "_x",
            "A",
            "a/b",
            "a b",
            "../x",
            "é",
            &"a".repeat(65),
        ] {
            let err = validate_name(bad).unwrap_err().to_string();
            assert!(err.contains("invalid image name"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn ids() {
        let id = format!("sha256-{}", "ab".repeat(32));
        validate_id(&id).unwrap();
        assert!(is_id_like(&id));
        assert!(is_id_like("sha256-0123456789ab"));
        assert!(!is_id_like("sha256-0123"));
        assert_eq!(short_id(&id), "sha256-abababababab");
        for bad in [
            "sha256-".to_owned(),
            format!("sha256-{}", "AB".repeat(32)),
            format!("sha256-{}/", "ab".repeat(32)),
            format!("sha512-{}", "ab".repeat(32)),
            "sha256-../../etc".to_owned(),
        ] {
            assert!(validate_id(&bad).is_err(), "{bad}");
        }
        assert_eq!(id_from_digest(&[0xab; 32]), id);
    }
}
