//! Client-side encryption of snapshot objects: XChaCha20-Poly1305 in the
//! STREAM construction (RustCrypto's `chacha20poly1305` with `stream`), so
//! an archive of any size is sealed and opened in bounded memory.
//!
//! An encrypted object is
//!
//! ```text
//! MAGIC (8) | key check (16) | nonce (19) | chunk* | last chunk
//! ```
//!
//! Each chunk seals [`CHUNK`] bytes of the archive (the last one 0 to
//! [`CHUNK`]) with the snapshot id as associated data. STREAM numbers the
//! chunks and flags the last, so a reordered, truncated, extended or
//! swapped-in object fails to open; the key check (a hash of the key, not
//! of the data) tells a wrong key apart from damage before any chunk is
//! opened.

use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::stream::{DecryptorBE32, EncryptorBE32};
use chacha20poly1305::aead::{KeyInit, Payload};
use sha2::{Digest, Sha256};

/// Marks an encrypted object (a zstd archive starts with `28 b5 2f fd`).
const MAGIC: &[u8; 8] = b"GSNAPX1\0";
const KEY_CHECK_LEN: usize = 16;
/// XChaCha20's 24-byte nonce less STREAM's 5 bytes of counter and flag.
const NONCE_LEN: usize = 19;
const HEADER_LEN: usize = MAGIC.len() + KEY_CHECK_LEN + NONCE_LEN;
/// Archive bytes per sealed chunk.
pub(crate) const CHUNK: usize = 64 * 1024;
const TAG_LEN: usize = 16;
const SEALED_CHUNK: usize = CHUNK + TAG_LEN;

/// A 256-bit snapshot key. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SnapshotKey([u8; 32]);

impl std::fmt::Debug for SnapshotKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotKey(..)")
    }
}

impl SnapshotKey {
    /// Parses the key's text form: 64 hex digits (surrounding whitespace,
    /// such as a file's final newline, ignored). The error never repeats
    /// the text.
    pub fn from_hex(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bytes =
            hex::decode(text).map_err(|_| "must be 64 hex digits (32 random bytes)".to_owned())?;
        let key: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "must be 64 hex digits (32 random bytes)".to_owned())?;
        Ok(Self(key))
    }

    fn check(&self) -> [u8; KEY_CHECK_LEN] {
        let digest = Sha256::new()
            .chain_update(b"garrison snapshot key check v1\0")
            .chain_update(self.0)
            .finalize();
        let mut check = [0; KEY_CHECK_LEN];
        check.copy_from_slice(&digest[..KEY_CHECK_LEN]);
        check
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.0.into())
    }
}

/// Why an object could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// Encrypted with another key.
    WrongKey,
    /// Encrypted, and this Garrison has no key.
    NoKey,
    /// Not encrypted, though this Garrison has a key (and so accepts only
    /// authenticated snapshots).
    NotEncrypted,
    /// A chunk failed authentication: damaged, truncated or tampered with.
    Damaged,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::WrongKey => "wrong snapshot key: it was encrypted with another key",
            Self::NoKey => {
                "it is encrypted and no snapshot key is set (GARRISON_SNAPSHOT_KEY or --snapshot-key-file)"
            }
            Self::NotEncrypted => {
                "it is not encrypted, but a snapshot key is set: only encrypted snapshots are accepted"
            }
            Self::Damaged => "its encrypted content failed authentication (damaged or tampered with)",
        })
    }
}

/// Seals an archive fed in pieces of any size.
pub(crate) struct Sealer {
    stream: Option<EncryptorBE32<XChaCha20Poly1305>>,
    aad: Vec<u8>,
    /// Archive bytes not sealed yet: always kept back until more arrive,
    /// since only [`Sealer::finish`] knows which chunk is the last.
    pending: Vec<u8>,
}

impl Sealer {
    /// A sealer for the object of snapshot `id`, and the header to store
    /// before the sealed chunks.
    pub(crate) fn new(key: &SnapshotKey, id: &str) -> (Self, Vec<u8>) {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&key.check());
        header.extend_from_slice(&nonce);
        let stream = EncryptorBE32::from_aead(key.cipher(), nonce.as_ref().into());
        let sealer = Self {
            stream: Some(stream),
            aad: id.as_bytes().to_vec(),
            pending: Vec::new(),
        };
        (sealer, header)
    }

    /// Seals what of `data` can be sealed now.
    pub(crate) fn push(&mut self, data: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(data);
        let mut out = Vec::new();
        let stream = self.stream.as_mut().expect("sealer used after finish");
        while self.pending.len() > CHUNK {
            let sealed = stream
                .encrypt_next(Payload {
                    msg: &self.pending[..CHUNK],
                    aad: &self.aad,
                })
                .expect("sealing a chunk cannot fail below the counter limit");
            out.extend_from_slice(&sealed);
            self.pending.drain(..CHUNK);
        }
        out
    }

    /// Seals the last chunk.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let stream = self.stream.take().expect("sealer used after finish");
        stream
            .encrypt_last(Payload {
                msg: &self.pending,
                aad: &self.aad,
            })
            .expect("sealing the last chunk cannot fail")
    }
}

enum Mode {
    /// Still reading the first bytes, which say whether it is encrypted.
    Undecided,
    Plain,
    Sealed(Option<DecryptorBE32<XChaCha20Poly1305>>),
}

/// Opens an object fed in pieces of any size: an encrypted one is checked
/// and decrypted, a plain one passed through (unless a key is set).
pub(crate) struct Opener {
    key: Option<SnapshotKey>,
    aad: Vec<u8>,
    mode: Mode,
    buffer: Vec<u8>,
}

impl Opener {
    /// Opens the object of snapshot `id`: decrypts with `key`, or passes
    /// plaintext through when there is none.
    pub(crate) fn new(key: Option<&SnapshotKey>, id: &str) -> Self {
        Self {
            key: key.cloned(),
            aad: id.as_bytes().to_vec(),
            mode: Mode::Undecided,
            buffer: Vec::new(),
        }
    }

    /// The archive bytes that `data` completes.
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<Vec<u8>, OpenError> {
        if let Mode::Plain = self.mode {
            return Ok(data.to_vec());
        }
        self.buffer.extend_from_slice(data);
        if let Mode::Undecided = self.mode {
            if !self.decide(false)? {
                return Ok(Vec::new());
            }
            if let Mode::Plain = self.mode {
                return Ok(std::mem::take(&mut self.buffer));
            }
        }
        let Mode::Sealed(Some(stream)) = &mut self.mode else {
            return Err(OpenError::Damaged);
        };
        let mut out = Vec::new();
        while self.buffer.len() > SEALED_CHUNK {
            let opened = stream
                .decrypt_next(Payload {
                    msg: &self.buffer[..SEALED_CHUNK],
                    aad: &self.aad,
                })
                .map_err(|_| OpenError::Damaged)?;
            out.extend_from_slice(&opened);
            self.buffer.drain(..SEALED_CHUNK);
        }
        Ok(out)
    }

    /// The rest of the archive, once the whole object was pushed.
    pub(crate) fn finish(mut self) -> Result<Vec<u8>, OpenError> {
        if let Mode::Undecided = self.mode {
            self.decide(true)?;
        }
        match &mut self.mode {
            Mode::Plain => Ok(std::mem::take(&mut self.buffer)),
            Mode::Sealed(stream) => {
                let stream = stream.take().ok_or(OpenError::Damaged)?;
                stream
                    .decrypt_last(Payload {
                        msg: &self.buffer,
                        aad: &self.aad,
                    })
                    .map_err(|_| OpenError::Damaged)
            }
            Mode::Undecided => Err(OpenError::Damaged),
        }
    }

    /// Decides plain or sealed once enough bytes arrived (or all did, at
    /// `end`); whether it is decided.
    fn decide(&mut self, end: bool) -> Result<bool, OpenError> {
        let seen = self.buffer.len().min(MAGIC.len());
        if self.buffer[..seen] != MAGIC[..seen] {
            if self.key.is_some() {
                return Err(OpenError::NotEncrypted);
            }
            self.mode = Mode::Plain;
            return Ok(true);
        }
        if self.buffer.len() < HEADER_LEN {
            return if end {
                Err(OpenError::Damaged)
            } else {
                Ok(false)
            };
        }
        let key = self.key.as_ref().ok_or(OpenError::NoKey)?;
        if self.buffer[MAGIC.len()..MAGIC.len() + KEY_CHECK_LEN] != key.check() {
            return Err(OpenError::WrongKey);
        }
        let nonce = &self.buffer[MAGIC.len() + KEY_CHECK_LEN..HEADER_LEN];
        let stream = DecryptorBE32::from_aead(key.cipher(), nonce.into());
        self.mode = Mode::Sealed(Some(stream));
        self.buffer.drain(..HEADER_LEN);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SnapshotKey {
        SnapshotKey([byte; 32])
    }

    fn seal(key: &SnapshotKey, id: &str, data: &[u8], piece: usize) -> Vec<u8> {
        let (mut sealer, mut out) = Sealer::new(key, id);
        for part in data.chunks(piece.max(1)) {
            out.extend(sealer.push(part));
        }
        out.extend(sealer.finish());
        out
    }

    fn open(
        key: Option<&SnapshotKey>,
        id: &str,
        object: &[u8],
        piece: usize,
    ) -> Result<Vec<u8>, OpenError> {
        let mut opener = Opener::new(key, id);
        let mut out = Vec::new();
        for part in object.chunks(piece.max(1)) {
            out.extend(opener.push(part)?);
        }
        out.extend(opener.finish()?);
        Ok(out)
    }

    fn archive(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn sealed_objects_open_whatever_the_piece_sizes() {
        let k = key(1);
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 3 * CHUNK + 17] {
            let data = archive(len);
            for piece in [1000, SEALED_CHUNK + 3] {
                let object = seal(&k, "snap", &data, piece);
                assert!(
                    !object
                        .windows(64)
                        .any(|w| data.len() >= 64 && w == &data[..64])
                );
                for open_piece in [999, 1 << 20] {
                    assert_eq!(
                        open(Some(&k), "snap", &object, open_piece).unwrap(),
                        data,
                        "len {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn wrong_key_missing_key_and_plain_objects_are_told_apart() {
        let object = seal(&key(1), "snap", &archive(10), 100);
        assert_eq!(
            open(Some(&key(2)), "snap", &object, 7),
            Err(OpenError::WrongKey)
        );
        assert_eq!(open(None, "snap", &object, 7), Err(OpenError::NoKey));
        let plain = archive(CHUNK + 5);
        assert_eq!(
            open(Some(&key(1)), "snap", &plain, 7),
            Err(OpenError::NotEncrypted)
        );
        assert_eq!(open(None, "snap", &plain, 7).unwrap(), plain);
        assert_eq!(open(None, "snap", b"ab", 7).unwrap(), b"ab");
    }

    #[test]
    fn truncation_reordering_flips_and_swaps_are_detected() {
        let k = key(3);
        let object = seal(&k, "snap", &archive(3 * CHUNK + 10), 4096);
        let body = HEADER_LEN;
        // Cut at a chunk boundary: the last chunk left is not flagged last.
        let cut = &object[..body + 2 * SEALED_CHUNK];
        assert_eq!(open(Some(&k), "snap", cut, 4096), Err(OpenError::Damaged));
        assert_eq!(
            open(Some(&k), "snap", &object[..object.len() - 1], 4096),
            Err(OpenError::Damaged)
        );
        let mut swapped = object.clone();
        let (a, b) = (body, body + SEALED_CHUNK);
        let first = object[a..b].to_vec();
        swapped.copy_within(b..b + SEALED_CHUNK, a);
        swapped[b..b + SEALED_CHUNK].copy_from_slice(&first);
        assert_eq!(
            open(Some(&k), "snap", &swapped, 4096),
            Err(OpenError::Damaged)
        );
        let mut flipped = object.clone();
        flipped[body + 10] ^= 1;
        assert_eq!(
            open(Some(&k), "snap", &flipped, 4096),
            Err(OpenError::Damaged)
        );
        // Another snapshot's object under this id.
        assert_eq!(
            open(Some(&k), "other", &object, 4096),
            Err(OpenError::Damaged)
        );
    }

    #[test]
    fn keys_parse_from_64_hex_digits_only() {
        let text = format!("{}\n", "ab".repeat(32));
        assert_eq!(
            SnapshotKey::from_hex(&text).unwrap(),
            SnapshotKey([0xab; 32])
        );
        for bad in ["", "ab", &"zz".repeat(32), &"ab".repeat(33)] {
            let error = SnapshotKey::from_hex(bad).unwrap_err();
            assert!(!error.contains("zz") && error.contains("64 hex digits"));
        }
        assert_eq!(format!("{:?}", key(9)), "SnapshotKey(..)");
    }
}
