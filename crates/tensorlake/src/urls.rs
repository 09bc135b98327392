//! Where the calls go, and how a proxied data-plane call names its sandbox
//! ([`SANDBOX_ID_HEADER`]). The official SDK sends `/sandboxes` and
//! `/snapshots` to the sandbox API host, not to the API URL: the value of
//! `TENSORLAKE_SANDBOX_API_URL` when set, else derived from the API URL
//! (`api.X` becomes `sandbox.X`; a local API is its own sandbox API; any
//! other host gets Tensorlake's default). See `resolve_sandbox_lifecycle_url`
//! in `src/lib.rs` of the `tensorlake` crate.
//!
//! One deliberate difference: the SDK keeps only `localhost` and
//! `127.0.0.1` unchanged, Garrison every loopback address, so a mock on
//! `[::1]` is never mistaken for a reason to call Tensorlake itself.

use crate::error::{Error, Result};

/// Header naming the sandbox a proxied (data-plane) request is for.
pub(crate) const SANDBOX_ID_HEADER: &str = "X-Tensorlake-Sandbox-Id";

/// Tensorlake's sandbox API (lifecycle calls).
pub(crate) const DEFAULT_SANDBOX_API_URL: &str = "https://sandbox.tensorlake.ai";

/// The lifecycle base URL for `api_url`, or `explicit` when given.
pub(crate) fn sandbox_api_url(api_url: &url::Url, explicit: Option<&str>) -> Result<url::Url> {
    match explicit.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => parse_sandbox_api_url(url),
        None => Ok(derived(api_url)),
    }
}

/// An explicit sandbox API URL: absolute http(s) with a host, and nothing
/// after the path (paths are appended to it).
pub(crate) fn parse_sandbox_api_url(text: &str) -> Result<url::Url> {
    let invalid = |why: &str| Error::Invalid(format!("Tensorlake sandbox API URL {text:?}: {why}"));
    let url =
        url::Url::parse(text.trim().trim_end_matches('/')).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid("expected http(s)://host"));
    }
    if url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(invalid("no query, fragment or credentials"));
    }
    Ok(url)
}

fn derived(api_url: &url::Url) -> url::Url {
    if is_loopback(api_url) {
        return api_url.clone();
    }
    if let Some(rest) = api_url.host_str().and_then(|h| h.strip_prefix("api.")) {
        let mut url = api_url.clone();
        if url.set_host(Some(&format!("sandbox.{rest}"))).is_ok() {
            return url;
        }
    }
    url::Url::parse(DEFAULT_SANDBOX_API_URL).expect("the default is a URL")
}

/// Whether the URL names this machine.
pub(crate) fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derive(api: &str) -> String {
        sandbox_api_url(&url::Url::parse(api).unwrap(), None)
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_sandbox_host_is_derived_as_the_sdk_does() {
        assert_eq!(
            derive("https://api.tensorlake.ai"),
            "https://sandbox.tensorlake.ai/"
        );
        assert_eq!(
            derive("https://api.eu.tensorlake.dev:8443"),
            "https://sandbox.eu.tensorlake.dev:8443/"
        );
        assert_eq!(
            derive("https://byoc.example.com"),
            "https://sandbox.tensorlake.ai/"
        );
        assert_eq!(derive("http://127.0.0.1:9000"), "http://127.0.0.1:9000/");
        assert_eq!(derive("http://localhost:9000"), "http://localhost:9000/");
        assert_eq!(derive("http://[::1]:9000"), "http://[::1]:9000/");
    }

    #[test]
    fn an_explicit_url_wins_and_is_checked() {
        let api = url::Url::parse("https://api.tensorlake.ai").unwrap();
        let explicit = sandbox_api_url(&api, Some(" https://byoc-acme.tensorlake.ai/ ")).unwrap();
        assert_eq!(explicit.as_str(), "https://byoc-acme.tensorlake.ai/");
        assert_eq!(
            sandbox_api_url(&api, Some("")).unwrap().as_str(),
            "https://sandbox.tensorlake.ai/"
        );
        for bad in [
            "byoc.tensorlake.ai",
            "ftp://x",
            "https://x/?a=1",
            "https://u:p@x",
        ] {
            assert!(parse_sandbox_api_url(bad).is_err(), "{bad}");
        }
    }
}
