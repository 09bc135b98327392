//! Resolving `devin-remote` on the orchestrator's side.
//!
//! The binary is downloaded outside every sandbox (a sandbox with an enabled
//! network policy may not reach the distribution), verified against its
//! published SHA-256, cached, and verified again each time it is read from
//! the cache to be copied into a sandbox (a burst of starts reads it once:
//! the verified bytes stay in memory for a few seconds after their last
//! use).

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
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
    /// Where it is.
    pub path: PathBuf,
    /// Hex SHA-256 of the file.
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
/// Why no verified binary could be had.
pub enum ResolveError {
    /// The binary does not match its published checksum: refused.
    #[error("devin-remote {sha} failed verification: expected sha256 {expected}, got {actual}")]
    ChecksumMismatch {
        /// The build.
        sha: String,
        /// The published SHA-256.
        expected: String,
        /// What the download hashed to.
        actual: String,
    },
    #[error("devin-remote {0} is not published")]
    /// No such build is published.
    NotFound(String),
    #[error("invalid devin-remote reference: {0}")]
    /// The reference is not a build.
    Invalid(String),
    /// Network trouble or a server error: worth trying again.
    #[error("fetching devin-remote: {0:#}")]
    Transient(anyhow::Error),
    #[error("devin-remote cache: {0:#}")]
    /// The cache failed.
    Cache(anyhow::Error),
}

impl ResolveError {
    /// Whether the binary failed verification.
    pub fn is_checksum_mismatch(&self) -> bool {
        matches!(self, Self::ChecksumMismatch { .. })
    }
}

/// Fetches, verifies and caches `devin-remote` builds, per sandbox
/// architecture.
pub struct RemoteResolver {
    http: reqwest::Client,
    base: Url,
    cache_dir: PathBuf,
    /// The newest SHA per platform suffix, and when it was read.
    latest: Mutex<HashMap<&'static str, (String, Instant)>>,
    /// Binaries verified by this process: (sha, suffix) -> resolved.
    verified: Mutex<HashMap<(String, &'static str), ResolvedRemote>>,
    /// Held while a build is read from disk or downloaded, so that a burst
    /// of sessions missing the same build downloads it once, not once each.
    fetching: tokio::sync::Mutex<()>,
    /// The bytes last verified, for the starts right after.
    recent: RecentBytes,
}

/// How long verified bytes are kept in memory after their last use: a
/// burst of starts reads and hashes the binary once, and an idle Garrison
/// does not keep it in its memory.
const RECENT_KEEP: Duration = Duration::from_secs(20);

/// The last verified binary, kept in memory for [`RECENT_KEEP`] after its
/// last use. Memory is Garrison's own, so bytes taken from it need no
/// second check; the cache file on disk is read and checked again once
/// they were dropped.
#[derive(Clone, Default)]
struct RecentBytes {
    slot: Arc<Mutex<Option<Recent>>>,
}

struct Recent {
    remote: ResolvedRemote,
    bytes: Arc<[u8]>,
    used: Instant,
}

impl RecentBytes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Recent>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, remote: &ResolvedRemote) -> Option<Arc<[u8]>> {
        let mut slot = self.lock();
        let recent = slot.as_mut().filter(|r| r.remote == *remote)?;
        recent.used = Instant::now();
        Some(recent.bytes.clone())
    }

    fn put(&self, remote: &ResolvedRemote, bytes: Arc<[u8]>) {
        *self.lock() = Some(Recent {
            remote: remote.clone(),
            bytes,
            used: Instant::now(),
        });
        // Drops the bytes once unused for RECENT_KEEP; each use pushes the
        // end back, so one sweeper per put is enough.
        let this = self.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                loop {
                    let left = match &*this.lock() {
                        Some(recent) => RECENT_KEEP.saturating_sub(recent.used.elapsed()),
                        None => return,
                    };
                    if left.is_zero() {
                        *this.lock() = None;
                        return;
                    }
                    tokio::time::sleep(left).await;
                }
            });
        }
    }
}

/// The distribution's name for the platform of a sandbox of `arch`: the
/// remote runs in the sandbox, so its architecture decides, not the
/// orchestrator's.
pub(crate) fn platform_suffix(arch: sandbox::Arch) -> &'static str {
    match arch {
        sandbox::Arch::Aarch64 => "linux_arm64",
        sandbox::Arch::X86_64 => "linux_x64",
    }
}

/// A SHA from the server or the distribution names files and URLs, so it
/// must be plain hex.
pub(crate) fn validate_sha(sha: &str) -> Result<(), ResolveError> {
    let ok = (7..=64).contains(&sha.len()) && sha.bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(())
    } else {
        Err(ResolveError::Invalid(format!(
            "{sha:?} is not a hex commit SHA"
        )))
    }
}

/// Reads a `.sha256` file: the hex digest alone, or followed by the name of
/// the file it is for (`sha256sum` output, `*` marking binary mode). Any
/// other shape is refused with the reason, as is a digest for another file
/// than `file` (say, another platform's build).
pub(crate) fn parse_sha256_file(text: &str, file: &str) -> Result<String, String> {
    let mut tokens = text.split_whitespace();
    let digest = tokens.next().ok_or("it is empty")?;
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("it does not begin with a 64-hex-digit SHA-256".to_owned());
    }
    if let Some(name) = tokens.next() {
        let name = name.strip_prefix('*').unwrap_or(name);
        if name != file {
            return Err(format!("it is the digest of {name:?}, not {file:?}"));
        }
    }
    if tokens.next().is_some() {
        return Err("more follows the digest and the file name".to_owned());
    }
    Ok(digest.to_ascii_lowercase())
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl RemoteResolver {
    /// A resolver downloading from `static_base_url` into `cache_dir`.
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
            latest: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            fetching: tokio::sync::Mutex::new(()),
            recent: RecentBytes::default(),
        })
    }

    /// The build for sandboxes of `arch` at `pinned`, or the latest when
    /// `None`: from the cache when it is there and intact, else downloaded
    /// and verified.
    pub async fn resolve(
        &self,
        pinned: Option<&str>,
        arch: sandbox::Arch,
    ) -> Result<ResolvedRemote, ResolveError> {
        let suffix = platform_suffix(arch);
        let sha = match pinned {
            Some(sha) => sha.to_ascii_lowercase(),
            None => self.latest_sha(suffix).await?,
        };
        validate_sha(&sha)?;
        let key = (sha, suffix);
        if let Some(hit) = self.verified_hit(&key) {
            return Ok(hit);
        }
        let _fetching = self.fetching.lock().await;
        if let Some(hit) = self.verified_hit(&key) {
            return Ok(hit);
        }
        let resolved = match self.cached(&key.0, suffix).await {
            Some(hit) => hit,
            None => self.download(&key.0, suffix).await?,
        };
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, resolved.clone());
        Ok(resolved)
    }

    fn verified_hit(&self, key: &(String, &'static str)) -> Option<ResolvedRemote> {
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// The binary's bytes, verified again against the digest recorded at
    /// download, for copying into a sandbox.
    pub async fn verified_bytes(&self, remote: &ResolvedRemote) -> Result<Arc<[u8]>, ResolveError> {
        if let Some(bytes) = self.recent.get(remote) {
            return Ok(bytes);
        }
        // Reading and hashing a binary of tens of megabytes is seconds of
        // CPU over a burst: off the async workers.
        let path = remote.path.clone();
        let (bytes, actual) = tokio::task::spawn_blocking(move || {
            std::fs::read(&path).map(|bytes| {
                let actual = hex_sha256(&bytes);
                (bytes, actual)
            })
        })
        .await
        .map_err(|e| ResolveError::Cache(anyhow::Error::new(e).context("hashing the binary")))?
        .map_err(|e| {
            ResolveError::Cache(
                anyhow::Error::new(e).context(format!("reading {}", remote.path.display())),
            )
        })?;
        if actual != remote.sha256 {
            self.verified
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|_, resolved| resolved.path != remote.path);
            let _ = std::fs::remove_file(&remote.path);
            return Err(ResolveError::ChecksumMismatch {
                sha: remote.sha.clone(),
                expected: remote.sha256.clone(),
                actual,
            });
        }
        let bytes: Arc<[u8]> = bytes.into();
        self.recent.put(remote, bytes.clone());
        Ok(bytes)
    }

    fn file_name(sha: &str, suffix: &str) -> String {
        format!("devin-remote_{sha}_{suffix}")
    }

    fn url(&self, file: &str) -> Result<Url, ResolveError> {
        self.base
            .join(file)
            .map_err(|e| ResolveError::Invalid(e.to_string()))
    }

    async fn latest_sha(&self, suffix: &'static str) -> Result<String, ResolveError> {
        if let Some((sha, at)) = self
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(suffix)
            && at.elapsed() < LATEST_TTL
        {
            return Ok(sha.clone());
        }
        let text = self.get_text(&format!("latest_{suffix}")).await?;
        let sha = text.trim().to_ascii_lowercase();
        validate_sha(&sha)?;
        self.latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(suffix, (sha.clone(), Instant::now()));
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

    fn cache_paths(&self, sha: &str, suffix: &str) -> (PathBuf, PathBuf) {
        let binary = self.cache_dir.join(Self::file_name(sha, suffix));
        let digest = binary.with_extension("sha256");
        (binary, digest)
    }

    /// A cached binary whose bytes still match the digest recorded when it
    /// was downloaded and verified.
    async fn cached(&self, sha: &str, suffix: &str) -> Option<ResolvedRemote> {
        let (binary, digest_file) = self.cache_paths(sha, suffix);
        let recorded = tokio::fs::read_to_string(&digest_file).await.ok()?;
        let expected = parse_sha256_file(&recorded, &Self::file_name(sha, suffix)).ok()?;
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

    async fn download(&self, sha: &str, suffix: &str) -> Result<ResolvedRemote, ResolveError> {
        let file = Self::file_name(sha, suffix);
        let published = self.get_text(&format!("{file}.sha256")).await?;
        let expected = parse_sha256_file(&published, &file).map_err(|reason| {
            ResolveError::Invalid(format!("{file}.sha256 is refused: {reason}"))
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
        let (binary, digest_file) = self.cache_paths(sha, suffix);
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
mod tests;
