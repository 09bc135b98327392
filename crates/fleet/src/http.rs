//! Small HTTP helpers shared by the client, the watch and the PKCE exchange:
//! path encoding, size-capped body reading, reqwest error mapping.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::error::FleetError;

/// Everything but RFC 3986 "unreserved" characters is encoded, so `/`, `?`,
/// `#` and `%` in a server-supplied id stay inside one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes one path segment. `.` and `..` are refused: URL parsers
/// (reqwest's included) resolve them, even percent-encoded, as "this" and
/// "parent" directory, so they cannot name a resource.
pub(crate) fn segment(value: &str) -> Result<String, FleetError> {
    if value.is_empty() {
        return Err(FleetError::InvalidArgument("empty path segment".into()));
    }
    if value == "." || value == ".." {
        return Err(FleetError::InvalidArgument(format!(
            "{value:?} cannot be used as a path segment"
        )));
    }
    Ok(utf8_percent_encode(value, SEGMENT).to_string())
}

/// Maps a reqwest failure to a typed error, keeping timeouts apart.
pub(crate) fn transport(route: &'static str, err: reqwest::Error, after: Duration) -> FleetError {
    if err.is_timeout() {
        FleetError::Timeout {
            route,
            what: "request",
            after,
        }
    } else {
        FleetError::Transport { route, error: err }
    }
}

/// Reads a whole body, refusing it as soon as it is known to exceed `limit`:
/// from `Content-Length` before reading, or while streaming a chunked body.
pub(crate) async fn read_capped(
    route: &'static str,
    mut resp: reqwest::Response,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, FleetError> {
    if resp.content_length().is_some_and(|len| len > limit as u64) {
        return Err(FleetError::BodyTooLarge { route, limit });
    }
    let mut buf = BytesMut::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| transport(route, e, timeout))?
    {
        if buf.len() + chunk.len() > limit {
            return Err(FleetError::BodyTooLarge { route, limit });
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Reads at most about `limit` bytes of a body, for error snippets; read
/// failures just end the snippet.
pub(crate) async fn read_prefix(mut resp: reqwest::Response, limit: usize) -> Bytes {
    let mut buf = BytesMut::new();
    while buf.len() < limit {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let take = chunk.len().min(limit - buf.len());
                buf.extend_from_slice(&chunk[..take]);
            }
            _ => break,
        }
    }
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_keep_reserved_characters_inside() {
        assert_eq!(segment("devin-abc_1.2~x").unwrap(), "devin-abc_1.2~x");
        assert_eq!(segment("a/b?c").unwrap(), "a%2Fb%3Fc");
        assert_eq!(segment("../x#%").unwrap(), "..%2Fx%23%25");
        assert_eq!(segment("é").unwrap(), "%C3%A9");
        assert!(segment("..").is_err());
        assert!(segment(".").is_err());
        assert!(segment("").is_err());
    }
}
