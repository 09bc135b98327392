//! Reading a tar member's header and the extended headers before it, for
//! [`super`]'s dealer: sizes, names, owners, link targets.

use std::io::{self, Read};

use anyhow::{Context, anyhow, bail, ensure};

use sandbox::SandboxError;

pub(super) const BLOCK: usize = 512;
/// The longest name the kernel takes (with its NUL), as tar passes it.
pub(super) const PATH_MAX: usize = libc::PATH_MAX as usize;

/// What the extended headers before a member say about it.
#[derive(Default)]
pub(super) struct Pending {
    pub size: Option<u64>,
    pub name: Option<Vec<u8>>,
    /// A sparse file's real name (`GNU.sparse.name`): its header's own name
    /// is a stand-in (`GNUSparseFile.<pid>/…`) that tar replaces with it.
    pub sparse_name: Option<Vec<u8>>,
    pub uid: Option<u64>,
    pub gid: Option<u64>,
    /// A link's target.
    pub link: Option<Vec<u8>>,
}

impl Pending {
    /// Takes `size`, names, owners and link targets from pax records (`"<len> <key>=<value>\n"`).
    pub(super) fn pax(&mut self, mut data: &[u8]) -> anyhow::Result<()> {
        while !data.is_empty() {
            let space = data
                .iter()
                .position(|&b| b == b' ')
                .context("a malformed pax record")?;
            let len: usize = std::str::from_utf8(&data[..space])?
                .parse()
                .context("a malformed pax record length")?;
            ensure!(
                len > space + 1 && len <= data.len() && data[len - 1] == b'\n',
                "a malformed pax record"
            );
            let record = &data[space + 1..len - 1];
            if let Some(eq) = record.iter().position(|&b| b == b'=') {
                let (key, value) = (&record[..eq], &record[eq + 1..]);
                let decimal = || -> anyhow::Result<u64> {
                    std::str::from_utf8(value)?
                        .parse()
                        .context("a malformed pax number")
                };
                match key {
                    b"size" => self.size = Some(decimal()?),
                    b"uid" => self.uid = Some(decimal()?),
                    b"gid" => self.gid = Some(decimal()?),
                    b"path" => self.name = Some(value.to_vec()),
                    b"GNU.sparse.name" => self.sparse_name = Some(value.to_vec()),
                    b"linkpath" => self.link = Some(value.to_vec()),
                    _ => {}
                }
            }
            data = &data[len..];
        }
        Ok(())
    }
}

/// Refuses a name no `tar` can make (see [`super`]).
pub(super) fn makeable(name: &[u8]) -> anyhow::Result<()> {
    if name.len() < PATH_MAX {
        return Ok(());
    }
    let start = String::from_utf8_lossy(&name[..name.len().min(64)]).into_owned();
    Err(anyhow!(SandboxError::Unrestorable(format!(
        "the snapshot holds a path of {} bytes ({start}…), longer than the host's \
         PATH_MAX of {PATH_MAX}: tar cannot restore it (made deeper than tar can reach; \
         the snapshot is kept)",
        name.len()
    ))))
}

/// Fills `block`; false at a clean end of input.
pub(super) fn read_block(input: &mut impl Read, block: &mut [u8; BLOCK]) -> anyhow::Result<bool> {
    let mut filled = 0;
    while filled < BLOCK {
        match input.read(&mut block[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => bail!("the archive ends inside a header"),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading the archive"),
        }
    }
    Ok(true)
}

/// Appends exactly `len` bytes of `input` to `out`.
pub(super) fn copy_exact(input: &mut impl Read, out: &mut Vec<u8>, len: u64) -> anyhow::Result<()> {
    let copied = input.take(len).read_to_end(out)?;
    ensure!(copied as u64 == len, "the archive ends inside a member");
    Ok(())
}

/// `size` rounded up to whole blocks.
pub(super) fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK as u64) * BLOCK as u64
}

/// A numeric header field (size, uid, gid): octal, or base-256 when its
/// top bit is set (as GNU tar writes what octal cannot hold).
pub(super) fn number(field: &[u8]) -> anyhow::Result<u64> {
    if field[0] & 0x80 != 0 {
        ensure!(field[0] == 0x80, "a negative or oversized number");
        return field[1..].iter().try_fold(0u64, |acc, &b| {
            acc.checked_mul(256)
                .map(|v| v + u64::from(b))
                .context("an oversized number")
        });
    }
    let text = std::str::from_utf8(field)
        .context("a malformed number")?
        .trim_matches(|c| c == '\0' || c == ' ');
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).context("a malformed number")
}

/// The name a ustar header holds (prefix and name).
pub(super) fn ustar_name(header: &[u8; BLOCK]) -> Vec<u8> {
    let name = c_string(&header[0..100]);
    let prefix = c_string(&header[345..500]);
    if &header[257..262] == b"ustar" && !prefix.is_empty() {
        [prefix, b"/", name].concat()
    } else {
        name.to_vec()
    }
}

pub(super) fn c_string(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}
