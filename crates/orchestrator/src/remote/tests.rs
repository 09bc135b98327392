//! Resolving devin-remote: the checksum file, the sandbox's architecture,
//! one download for a burst of sessions, what a SHA may be.

use super::*;

#[test]
fn a_sha256_file_holds_the_digest_and_at_most_the_file_name() {
    let d = "a".repeat(64);
    let file = "devin-remote_abc1234_linux_x64";
    let parse = |text: &str| parse_sha256_file(text, file);
    assert_eq!(parse(&format!("{d}\n")), Ok(d.clone()));
    assert_eq!(parse(&format!("{d}  {file}\n")), Ok(d.clone()));
    // `sha256sum -b` marks the name with `*`.
    assert_eq!(parse(&format!("{d} *{file}")), Ok(d.clone()));
    assert_eq!(parse(&d.to_uppercase()), Ok(d.clone()));
    for bad in [
        String::new(),
        "abc".to_owned(),
        format!("sha256:{d}"),
        format!("{d}0"),
        format!("{d}  devin-remote_abc1234_linux_arm64"),
        format!("{d}  {file}  extra"),
        format!("<html>{d}</html>"),
    ] {
        let err = parse(&bad).unwrap_err();
        assert!(!err.is_empty(), "{bad:?}");
    }
}

/// Serves `latest_<suffix>`, the binary and its `.sha256` for both
/// Linux suffixes, with different bytes each.
async fn distribution() -> String {
    use axum::extract::Path as UrlPath;
    async fn file(UrlPath(name): UrlPath<String>) -> Result<Vec<u8>, axum::http::StatusCode> {
        for suffix in ["linux_x64", "linux_arm64"] {
            let bytes = format!("#!/bin/sh\n# {suffix}\n").into_bytes();
            let binary = format!("devin-remote_{DIST_SHA}_{suffix}");
            if name == format!("latest_{suffix}") {
                return Ok(format!("{DIST_SHA}\n").into_bytes());
            } else if name == binary {
                return Ok(bytes);
            } else if name == format!("{binary}.sha256") {
                return Ok(format!("{}  {binary}\n", hex_sha256(&bytes)).into_bytes());
            }
        }
        Err(axum::http::StatusCode::NOT_FOUND)
    }
    let app = axum::Router::new().route("/{file}", axum::routing::get(file));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

const DIST_SHA: &str = "0123456789abcdef0123456789abcdef01234567";

#[tokio::test]
async fn the_build_follows_the_sandboxes_architecture() {
    let url = distribution().await;
    let dir = tempfile::tempdir().unwrap();
    let resolver = RemoteResolver::new(&url, dir.path().join("cache")).unwrap();
    for (arch, suffix) in [
        (sandbox::Arch::Aarch64, "linux_arm64"),
        (sandbox::Arch::X86_64, "linux_x64"),
    ] {
        for pinned in [None, Some(DIST_SHA)] {
            let remote = resolver.resolve(pinned, arch).await.unwrap();
            assert_eq!(remote.sha, DIST_SHA);
            assert!(
                remote.path.to_string_lossy().ends_with(suffix),
                "{arch}: {}",
                remote.path.display()
            );
            let bytes = resolver.verified_bytes(&remote).await.unwrap();
            assert_eq!(*bytes, *format!("#!/bin/sh\n# {suffix}\n").into_bytes());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sessions_downloads_a_missing_build_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let downloads = Arc::new(AtomicUsize::new(0));
    let counted = downloads.clone();
    let bytes = b"#!/bin/sh\n".to_vec();
    let binary = format!("devin-remote_{DIST_SHA}_linux_x64");
    let digest = format!("{}  {binary}\n", hex_sha256(&bytes));
    let app = axum::Router::new()
        .route(
            &format!("/{binary}"),
            axum::routing::get(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                let bytes = bytes.clone();
                async move { bytes }
            }),
        )
        .route(
            &format!("/{binary}.sha256"),
            axum::routing::get(move || {
                let digest = digest.clone();
                async move { digest }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let resolver = Arc::new(RemoteResolver::new(&url, dir.path().join("cache")).unwrap());
    let burst: Vec<_> = (0..20)
        .map(|_| {
            let resolver = resolver.clone();
            tokio::spawn(async move {
                resolver
                    .resolve(Some(DIST_SHA), sandbox::Arch::X86_64)
                    .await
                    .unwrap()
            })
        })
        .collect();
    for session in burst {
        assert_eq!(session.await.unwrap().sha, DIST_SHA);
    }
    assert_eq!(downloads.load(Ordering::SeqCst), 1);
}

#[test]
fn shas_must_be_hex() {
    assert!(validate_sha("0123abcdef").is_ok());
    assert!(validate_sha("../../etc/passwd").is_err());
    assert!(validate_sha("abc").is_err());
    assert!(validate_sha(&"a".repeat(65)).is_err());
}
