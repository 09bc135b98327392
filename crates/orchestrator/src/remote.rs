//! Resolving `devin-remote` on the orchestrator's side.
//!
//! The binary is downloaded outside every sandbox (a sandbox with an enabled
//! network policy may not reach the distribution), verified against its
//! published SHA-256, cached, and verified again each time it is copied into
//! a sandbox.

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sha2::{Digest, Sha256};
use url::Url;

/// Largest binary accepted from the distribution.
const MAX_BINARY_BYTES: u64 = 512 * 1024 * 1024;
/// Largest `latest_*` or `.sha256` text accepted.
const MAX_TEXT_BYTES: u64 = 4096;
/// How long a `latest` answer is reused before asking again.
const LATEST_TTL: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// A verified binary in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedRemote {
    /// The Devin commit SHA that names the build.
    pub sha: String,
    pub path: PathBuf,
    /// Hex SHA-256 of the file.
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The binary does not match its published checksum: refused.
    #[error("devin-remote {sha} failed verification: expected sha256 {expected}, got {actual}")]
    ChecksumMismatch {
        sha: String,
        expected: String,
        actual: String,
    },
    #[error("devin-remote {0} is not published")]
    NotFound(String),
    #[error("invalid devin-remote reference: {0}")]
    Invalid(String),
    /// Network trouble or a server error: worth trying again.
    #[error("fetching devin-remote: {0:#}")]
    Transient(anyhow::Error),
    #[error("devin-remote cache: {0:#}")]
    Cache(anyhow::Error),
}

impl ResolveError {
    pub fn is_checksum_mismatch(&self) -> bool {
        matches!(self, Self::ChecksumMismatch { .. })
    }
}

pub struct RemoteResolver {
    http: reqwest::Client,
    base: Url,
    cache_dir: PathBuf,
    suffix: &'static str,
    latest: Mutex<Option<(String, Instant)>>,
    /// Binaries verified by this process: sha -> resolved.
    verified: Mutex<HashMap<String, ResolvedRemote>>,
}

/// The distribution's name for this machine's platform.
pub fn platform_suffix() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "linux_arm64",
        _ => "linux_x64",
    }
}

/// A SHA from the server or the distribution names files and URLs, so it
/// must be plain hex.
pub fn validate_sha(sha: &str) -> Result<(), ResolveError> {
    let ok = (7..=64).contains(&sha.len()) && sha.bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(())
    } else {
        Err(ResolveError::Invalid(format!(
            "{sha:?} is not a hex commit SHA"
        )))
    }
}

/// Reads the first 64-hex-digit token of a `.sha256` file.
pub fn parse_sha256_file(text: &str) -> Option<String> {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .find(|token| token.len() == 64)
        .map(|t| t.to_ascii_lowercase())
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl RemoteResolver {
    pub fn new(static_base_url: &str, cache_dir: PathBuf) -> anyhow::Result<Self> {
        let mut base = Url::parse(static_base_url)
            .map_err(|e| anyhow::anyhow!("invalid static base URL {static_base_url:?}: {e}"))?;
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        std::fs::create_dir_all(&cache_dir)?;
        std::fs::set_permissions(&cache_dir, std::fs::Permissions::from_mode(0o700))?;
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            http,
            base,
            cache_dir,
            suffix: platform_suffix(),
            latest: Mutex::new(None),
            verified: Mutex::new(HashMap::new()),
        })
    }

    /// The binary for `pinned`, or the latest when `None`: from the cache
    /// when it is there and intact, else downloaded and verified.
    pub async fn resolve(&self, pinned: Option<&str>) -> Result<ResolvedRemote, ResolveError> {
        let sha = match pinned {
            Some(sha) => sha.to_ascii_lowercase(),
            None => self.latest_sha().await?,
        };
        validate_sha(&sha)?;
        if let Some(hit) = self
            .verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&sha)
        {
            return Ok(hit.clone());
        }
        let resolved = match self.cached(&sha).await {
            Some(hit) => hit,
            None => self.download(&sha).await?,
        };
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sha, resolved.clone());
        Ok(resolved)
    }

    /// The binary's bytes, verified again against the digest recorded at
    /// download, for copying into a sandbox.
    pub async fn verified_bytes(&self, remote: &ResolvedRemote) -> Result<Vec<u8>, ResolveError> {
        let bytes = tokio::fs::read(&remote.path).await.map_err(|e| {
            ResolveError::Cache(
                anyhow::Error::new(e).context(format!("reading {}", remote.path.display())),
            )
        })?;
        let actual = hex_sha256(&bytes);
        if actual != remote.sha256 {
            self.verified
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&remote.sha);
            let _ = std::fs::remove_file(&remote.path);
            return Err(ResolveError::ChecksumMismatch {
                sha: remote.sha.clone(),
                expected: remote.sha256.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    fn file_name(&self, sha: &str) -> String {
        format!("devin-remote_{sha}_{}", self.suffix)
    }

    fn url(&self, file: &str) -> Result<Url, ResolveError> {
        self.base
            .join(file)
            .map_err(|e| ResolveError::Invalid(e.to_string()))
    }

    async fn latest_sha(&self) -> Result<String, ResolveError> {
        if let Some((sha, at)) = &*self.latest.lock().unwrap_or_else(|p| p.into_inner())
            && at.elapsed() < LATEST_TTL
        {
            return Ok(sha.clone());
        }
        let text = self.get_text(&format!("latest_{}", self.suffix)).await?;
        let sha = text.trim().to_ascii_lowercase();
        validate_sha(&sha)?;
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((sha.clone(), Instant::now()));
        Ok(sha)
    }

    async fn get_text(&self, file: &str) -> Result<String, ResolveError> {
        let bytes = self.get_bytes(file, MAX_TEXT_BYTES).await?;
        String::from_utf8(bytes).map_err(|_| ResolveError::Invalid(format!("{file} is not text")))
    }

    async fn get_bytes(&self, file: &str, limit: u64) -> Result<Vec<u8>, ResolveError> {
        let url = self.url(file)?;
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| ResolveError::Transient(anyhow::anyhow!("GET {file}: {e}")))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(ResolveError::NotFound(file.to_owned()));
        }
        if !status.is_success() {
            return Err(ResolveError::Transient(anyhow::anyhow!(
                "GET {file}: HTTP {status}"
            )));
        }
        if response.content_length().is_some_and(|len| len > limit) {
            return Err(ResolveError::Invalid(format!(
                "{file} is larger than {limit} bytes"
            )));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ResolveError::Transient(anyhow::anyhow!("reading {file}: {e}")))?;
            if body.len() as u64 + chunk.len() as u64 > limit {
                return Err(ResolveError::Invalid(format!(
                    "{file} is larger than {limit} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn cache_paths(&self, sha: &str) -> (PathBuf, PathBuf) {
        let binary = self.cache_dir.join(self.file_name(sha));
        let digest = binary.with_extension("sha256");
        (binary, digest)
    }

    /// A cached binary whose bytes still match the digest recorded when it
    /// was downloaded and verified.
    async fn cached(&self, sha: &str) -> Option<ResolvedRemote> {
        let (binary, digest_file) = self.cache_paths(sha);
        let expected = parse_sha256_file(&tokio::fs::read_to_string(&digest_file).await.ok()?)?;
        let bytes = tokio::fs::read(&binary).await.ok()?;
        if hex_sha256(&bytes) != expected {
            tracing::warn!(sha, "cached devin-remote is corrupt; downloading it again");
            return None;
        }
        Some(ResolvedRemote {
            sha: sha.to_owned(),
            path: binary,
            sha256: expected,
        })
    }

    async fn download(&self, sha: &str) -> Result<ResolvedRemote, ResolveError> {
        let file = self.file_name(sha);
        let published = self.get_text(&format!("{file}.sha256")).await?;
        let expected = parse_sha256_file(&published).ok_or_else(|| {
            ResolveError::Invalid(format!("{file}.sha256 holds no SHA-256 digest"))
        })?;
        let bytes = self.get_bytes(&file, MAX_BINARY_BYTES).await?;
        let actual = hex_sha256(&bytes);
        if actual != expected {
            return Err(ResolveError::ChecksumMismatch {
                sha: sha.to_owned(),
                expected,
                actual,
            });
        }
        let (binary, digest_file) = self.cache_paths(sha);
        let cache_error = |e: std::io::Error| ResolveError::Cache(anyhow::Error::new(e));
        write_private(&binary, &bytes, 0o700).map_err(cache_error)?;
        write_private(
            &digest_file,
            format!("{expected}  {file}\n").as_bytes(),
            0o600,
        )
        .map_err(cache_error)?;
        tracing::info!(
            sha,
            bytes = bytes.len(),
            "downloaded and verified devin-remote"
        );
        Ok(ResolvedRemote {
            sha: sha.to_owned(),
            path: binary,
            sha256: expected,
        })
    }
}

fn write_private(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    // Unique per writer, not just per process: sessions starting together
    // on an empty cache download the same file at once, and a shared
    // temporary name made all but the first rename fail (ENOENT).
    let tmp = path.with_extension(format!(
        "tmp{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        std::io::Write::write_all(&mut file, bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_file_parsing_takes_the_first_digest() {
        let d = "a".repeat(64);
        assert_eq!(
            parse_sha256_file(&format!("{d}  devin-remote_x_linux_x64\n")),
            Some(d.clone())
        );
        assert_eq!(
            parse_sha256_file(&format!("sha256:{}", d.to_uppercase())),
            Some(d)
        );
        assert_eq!(parse_sha256_file("abc"), None);
    }

    #[test]
    fn shas_must_be_hex() {
        assert!(validate_sha("0123abcdef").is_ok());
        assert!(validate_sha("../../etc/passwd").is_err());
        assert!(validate_sha("abc").is_err());
        assert!(validate_sha(&"a".repeat(65)).is_err());
    }
}
