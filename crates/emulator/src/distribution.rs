//! The static `devin-remote` distribution, laid out like
//! `static.devin.ai/devin-rs/remote/`: per Linux platform (`linux_x64`,
//! `linux_arm64`) `latest_<platform>`, the binary
//! `devin-remote_<SHA>_<platform>` and its `.sha256`.
//!
//! Both platforms serve the one binary loaded (the emulator runs where its
//! sandboxes run, so it is built for the right one); what a test checks is
//! which file an orchestrator asks for.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::lock::lock;

/// The platforms served, as they end a file name.
const SUFFIXES: [&str; 2] = ["_linux_x64", "_linux_arm64"];
const PREFIX: &str = "devin-remote_";

/// Served when a corrupt build is asked for but no real binary is loaded.
const PLACEHOLDER: &[u8] = b"#!/bin/sh\necho 'not a devin-remote'\nexit 1\n";

#[derive(Clone, Debug)]
struct Build {
    bytes: Bytes,
    /// What the `.sha256` file says, which for a corrupt build is not the
    /// digest of `bytes`.
    sha256_hex: String,
}

/// The builds on offer, by the 40-hex SHA that names them.
#[derive(Debug, Default)]
pub(crate) struct Distribution {
    latest: Option<String>,
    builds: HashMap<String, Build>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Distribution {
    /// Loads the binary at `path`. Reading and hashing a ~20 MB debug build
    /// takes a noticeable fraction of a second, and test suites start many
    /// emulators, so the result is shared per process while the file's size
    /// and modification time stay the same.
    pub(crate) fn load(path: &Path) -> std::io::Result<Self> {
        type Key = (PathBuf, u64, Option<SystemTime>);
        static CACHE: OnceLock<Mutex<HashMap<Key, (String, Build)>>> = OnceLock::new();
        let meta = std::fs::metadata(path)?;
        let key = (path.to_path_buf(), meta.len(), meta.modified().ok());
        let cache = CACHE.get_or_init(Mutex::default);
        let cached = lock(cache).get(&key).cloned();
        let (sha, build) = match cached {
            Some(hit) => hit,
            None => {
                let fresh = Self::from_bytes(std::fs::read(path)?);
                let sha = fresh.latest.clone().expect("from_bytes sets latest");
                let build = fresh.builds[&sha].clone();
                lock(cache).insert(key, (sha.clone(), build.clone()));
                (sha, build)
            }
        };
        Ok(Self {
            latest: Some(sha.clone()),
            builds: HashMap::from([(sha, build)]),
        })
    }

    /// Serves `bytes` as latest, named by the first 40 hex of its SHA-256
    /// (the real service names builds by a 40-hex commit SHA).
    pub(crate) fn from_bytes(bytes: Vec<u8>) -> Self {
        let digest = sha256_hex(&bytes);
        let sha = digest[..40].to_owned();
        let mut builds = HashMap::new();
        builds.insert(
            sha.clone(),
            Build {
                bytes: Bytes::from(bytes),
                sha256_hex: digest,
            },
        );
        Self {
            latest: Some(sha),
            builds,
        }
    }

    pub(crate) fn latest(&self) -> Option<String> {
        self.latest.clone()
    }

    /// Registers a build whose bytes have one byte flipped while its
    /// `.sha256` keeps the genuine digest, so verification must fail.
    pub(crate) fn add_corrupt(&mut self) -> String {
        let genuine = self
            .latest
            .as_ref()
            .and_then(|sha| self.builds.get(sha))
            .map(|b| b.bytes.to_vec())
            .unwrap_or_else(|| PLACEHOLDER.to_vec());
        let mut bytes = genuine.clone();
        let at = rand::random_range(0..bytes.len());
        bytes[at] ^= 0xff;
        let sha = sha256_hex(&bytes)[..40].to_owned();
        self.builds.insert(
            sha.clone(),
            Build {
                bytes: Bytes::from(bytes),
                sha256_hex: sha256_hex(&genuine),
            },
        );
        sha
    }

    /// The body served for a file name under the distribution root.
    pub(crate) fn file(&self, name: &str) -> Option<(Bytes, &'static str)> {
        SUFFIXES
            .into_iter()
            .find_map(|suffix| self.platform_file(name, suffix))
    }

    fn platform_file(&self, name: &str, suffix: &str) -> Option<(Bytes, &'static str)> {
        if name == format!("latest{suffix}") {
            let sha = self.latest.as_ref()?;
            return Some((Bytes::from(format!("{sha}\n")), "text/plain"));
        }
        let rest = name.strip_prefix(PREFIX)?;
        if let Some(sha) = rest.strip_suffix(&format!("{suffix}.sha256")) {
            let build = self.builds.get(sha)?;
            let line = format!("{}  {PREFIX}{sha}{suffix}\n", build.sha256_hex);
            return Some((Bytes::from(line), "text/plain"));
        }
        let sha = rest.strip_suffix(suffix)?;
        let build = self.builds.get(sha)?;
        Some((build.bytes.clone(), "application/octet-stream"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_latest_binary_and_checksum() {
        let d = Distribution::from_bytes(b"binary".to_vec());
        let sha = d.latest().unwrap();
        assert_eq!(sha.len(), 40);
        let (latest, _) = d.file("latest_linux_x64").unwrap();
        assert_eq!(latest.as_ref(), format!("{sha}\n").as_bytes());
        let (bin, _) = d.file(&format!("devin-remote_{sha}_linux_x64")).unwrap();
        assert_eq!(bin.as_ref(), b"binary");
        let (sum, _) = d
            .file(&format!("devin-remote_{sha}_linux_x64.sha256"))
            .unwrap();
        let sum = String::from_utf8(sum.to_vec()).unwrap();
        assert!(sum.starts_with(&sha256_hex(b"binary")));
        assert!(d.file("devin-remote_nope_linux_x64").is_none());
    }

    #[test]
    fn both_linux_platforms_are_served_each_under_its_own_name() {
        let d = Distribution::from_bytes(b"binary".to_vec());
        let sha = d.latest().unwrap();
        for platform in ["linux_x64", "linux_arm64"] {
            let (latest, _) = d.file(&format!("latest_{platform}")).unwrap();
            assert_eq!(latest.as_ref(), format!("{sha}\n").as_bytes());
            let file = format!("devin-remote_{sha}_{platform}");
            assert_eq!(d.file(&file).unwrap().0.as_ref(), b"binary");
            let (sum, _) = d.file(&format!("{file}.sha256")).unwrap();
            let sum = String::from_utf8(sum.to_vec()).unwrap();
            assert_eq!(sum, format!("{}  {file}\n", sha256_hex(b"binary")));
        }
        assert!(d.file(&format!("devin-remote_{sha}_macos_arm64")).is_none());
    }

    #[test]
    fn corrupt_build_does_not_match_its_checksum() {
        let mut d = Distribution::from_bytes(b"binary".to_vec());
        let bad = d.add_corrupt();
        let (bin, _) = d.file(&format!("devin-remote_{bad}_linux_x64")).unwrap();
        let (sum, _) = d
            .file(&format!("devin-remote_{bad}_linux_x64.sha256"))
            .unwrap();
        let sum = String::from_utf8(sum.to_vec()).unwrap();
        assert!(!sum.starts_with(&sha256_hex(&bin)));
        assert_ne!(Some(bad), d.latest());
    }

    #[test]
    fn empty_distribution_serves_nothing() {
        let d = Distribution::default();
        assert!(d.file("latest_linux_x64").is_none());
    }
}
