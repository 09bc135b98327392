//! Applying one image layer (a tar stream) onto a root filesystem, with
//! OCI whiteouts, the way a container engine unpacks an image.
//!
//! - `dir/.wh.NAME` deletes `dir/NAME` of the layers below;
//! - `dir/.wh..wh..opq` makes `dir` opaque: everything the layers below put
//!   in it goes, what this layer puts in it stays;
//! - an entry replaces whatever was at its path, except that a directory
//!   over a directory merges;
//! - ownership, modes, symlinks, hard links and modification times are kept
//!   (ownership and device nodes only when running as root).
//!
//! Layers are untrusted input. An entry whose path or hard-link target has
//! a `..` component is refused, and every path is resolved component by
//! component inside the root, following the image's own symlinks as if the
//! root were `/`, so no entry can write outside it.

use std::collections::{HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};
use tar::EntryType;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_MARKER: &str = ".wh..wh..opq";
/// Symlinks followed while resolving one path, as Linux's `MAXSYMLINKS`.
const MAX_SYMLINKS: usize = 40;

/// Unpacks the tar stream `layer` onto `root`. `what` names the layer in
/// errors.
pub(crate) fn apply(root: &Path, layer: impl Read, what: &str) -> anyhow::Result<()> {
    let as_root = nix::unistd::geteuid().is_root();
    let mut archive = tar::Archive::new(layer);
    // Paths this layer wrote: an opaque directory keeps them.
    let mut ours: HashSet<PathBuf> = HashSet::new();
    let mut skipped_devices = 0usize;
    for entry in archive
        .entries()
        .with_context(|| format!("reading {what}"))?
    {
        let mut entry = entry.with_context(|| format!("reading {what}"))?;
        let raw = entry
            .path()
            .with_context(|| format!("reading {what}"))?
            .into_owned();
        let context = || format!("{what}: entry {}", raw.display());
        let rel = clean(&raw).with_context(context)?;
        let Some(name) = rel.file_name().map(OsStr::to_owned) else {
            continue; // The root itself ("./"): the image's root stays ours.
        };
        let parent = resolve(root, rel.parent().unwrap_or(Path::new(""))).with_context(context)?;
        let name_str = name.to_string_lossy();
        if name_str == OPAQUE_MARKER {
            clear_lower(&parent, &ours).with_context(context)?;
            continue;
        }
        if let Some(hidden) = name_str.strip_prefix(WHITEOUT_PREFIX) {
            // `.wh..wh.*` other than the opaque marker are aufs internals.
            if !hidden.starts_with(WHITEOUT_PREFIX) {
                remove_any(&parent.join(hidden)).with_context(context)?;
            }
            continue;
        }
        let dest = parent.join(&name);
        let header = entry.header().clone();
        let mode = header.mode().with_context(context)? & 0o7777;
        let kind = header.entry_type();
        match kind {
            EntryType::Directory => {
                if !fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir()) {
                    remove_any(&dest).with_context(context)?;
                    fs::create_dir(&dest).with_context(context)?;
                }
            }
            EntryType::Regular | EntryType::Continuous => {
                remove_any(&dest).with_context(context)?;
                // create_new + O_NOFOLLOW: never through a link planted
                // between the removal and here.
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&dest)
                    .with_context(context)?;
                io::copy(&mut entry, &mut file).with_context(context)?;
            }
            EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .with_context(context)?
                    .with_context(|| format!("{}: symlink without a target", context()))?
                    .into_owned();
                remove_any(&dest).with_context(context)?;
                std::os::unix::fs::symlink(&target, &dest).with_context(context)?;
            }
            EntryType::Link => {
                let target = entry
                    .link_name()
                    .with_context(context)?
                    .with_context(|| format!("{}: hard link without a target", context()))?
                    .into_owned();
                let target_rel = clean(&target).with_context(context)?;
                let target_name = target_rel
                    .file_name()
                    .with_context(|| format!("{}: hard link to the root", context()))?;
                let target_path = resolve(root, target_rel.parent().unwrap_or(Path::new("")))
                    .with_context(context)?
                    .join(target_name);
                if target_path != dest {
                    remove_any(&dest).with_context(context)?;
                    // linkat without AT_SYMLINK_FOLLOW: links the entry
                    // itself, never what a symlink points at.
                    fs::hard_link(&target_path, &dest).with_context(|| {
                        format!("{}: linking to {}", context(), target.display())
                    })?;
                }
                ours.insert(dest);
                continue; // Shares the target's inode and metadata.
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                if !as_root && kind != EntryType::Fifo {
                    skipped_devices += 1;
                    continue;
                }
                remove_any(&dest).with_context(context)?;
                make_node(&dest, &header, mode).with_context(context)?;
            }
            // Extension headers the tar crate does not fold into entries.
            EntryType::XGlobalHeader | EntryType::XHeader => continue,
            other => bail!("{}: unsupported entry type {other:?}", context()),
        }
        set_metadata(&dest, &header, mode, kind, as_root).with_context(context)?;
        ours.insert(dest);
    }
    if skipped_devices > 0 {
        tracing::warn!("{what}: skipped {skipped_devices} device nodes (not running as root)");
    }
    Ok(())
}

/// The entry's path relative to the root: `/` and `.` dropped, `..`
/// refused.
pub(crate) fn clean(path: &Path) -> anyhow::Result<PathBuf> {
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => {
                bail!(
                    "refusing path {}: `..` could escape the image",
                    path.display()
                )
            }
            Component::Prefix(_) => bail!("refusing path {}", path.display()),
        }
    }
    Ok(clean)
}

/// The directory `rel` inside `root`, following symlinks as if `root` were
/// `/` (an absolute link target restarts at `root`, `..` stops at it) and
/// creating missing directories (a layer need not list every parent).
pub(crate) fn resolve(root: &Path, rel: &Path) -> anyhow::Result<PathBuf> {
    resolve_dir(root, rel, true)
}

/// The file `rel` (which must exist) inside `root`, symlinks followed the
/// same way as [`resolve`]. For paths named by an image's manifest.
pub(crate) fn resolve_existing(root: &Path, rel: &Path) -> anyhow::Result<PathBuf> {
    resolve_file(root, &clean(rel)?, 0)
}

fn resolve_file(root: &Path, rel: &Path, hops: usize) -> anyhow::Result<PathBuf> {
    if hops > MAX_SYMLINKS {
        bail!("too many symlinks resolving {}", rel.display());
    }
    // Lexical `..` is right here: `rel` is a real directory plus a link
    // target, and the directory part has no symlinks left in it.
    let mut parts: Vec<OsString> = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    let name = parts
        .pop()
        .with_context(|| format!("{} names no file", rel.display()))?;
    let parent = resolve_dir(root, &parts.iter().collect::<PathBuf>(), false)?;
    let path = parent.join(&name);
    let meta =
        fs::symlink_metadata(&path).with_context(|| format!("{} is missing", rel.display()))?;
    if meta.file_type().is_symlink() {
        let base = parent.strip_prefix(root)?.to_owned();
        // An absolute target replaces `base`: it restarts at the root.
        return resolve_file(root, &base.join(fs::read_link(&path)?), hops + 1);
    }
    Ok(path)
}

fn resolve_dir(root: &Path, rel: &Path, create: bool) -> anyhow::Result<PathBuf> {
    let mut pending: VecDeque<OsString> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect();
    let mut current = root.to_owned();
    let mut depth = 0usize;
    let mut links = 0usize;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            if depth > 0 {
                current.pop();
                depth -= 1;
            }
            continue;
        }
        let next = current.join(&part);
        match fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                if links > MAX_SYMLINKS {
                    bail!("too many symlinks resolving {}", rel.display());
                }
                let target = fs::read_link(&next)?;
                if target.is_absolute() {
                    current = root.to_owned();
                    depth = 0;
                }
                let mut expanded: VecDeque<OsString> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(part) => Some(part.to_owned()),
                        Component::ParentDir => Some(OsString::from("..")),
                        _ => None,
                    })
                    .collect();
                expanded.extend(pending);
                pending = expanded;
            }
            Ok(meta) if meta.is_dir() => {
                current = next;
                depth += 1;
            }
            Ok(_) => bail!("{} is not a directory", next.display()),
            Err(err) if err.kind() == io::ErrorKind::NotFound && create => {
                fs::create_dir(&next).with_context(|| format!("creating {}", next.display()))?;
                fs::set_permissions(&next, fs::Permissions::from_mode(0o755))?;
                current = next;
                depth += 1;
            }
            Err(err) => return Err(err).with_context(|| format!("resolving {}", rel.display())),
        }
    }
    Ok(current)
}

/// Removes whatever is at `path` (a directory with its contents); nothing
/// there is fine.
fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// Removes what lower layers put under `dir`, keeping what this layer
/// wrote (and, inside directories this layer wrote, descending to remove
/// the lower layers' children).
fn clear_lower(dir: &Path, ours: &HashSet<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if !ours.contains(&path) {
            remove_any(&path)?;
        } else if fs::symlink_metadata(&path)?.is_dir() {
            clear_lower(&path, ours)?;
        }
    }
    Ok(())
}

fn make_node(dest: &Path, header: &tar::Header, mode: u32) -> anyhow::Result<()> {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    let kind = match header.entry_type() {
        EntryType::Char => SFlag::S_IFCHR,
        EntryType::Block => SFlag::S_IFBLK,
        _ => SFlag::S_IFIFO,
    };
    let major = header.device_major()?.unwrap_or(0);
    let minor = header.device_minor()?.unwrap_or(0);
    mknod(
        dest,
        kind,
        Mode::from_bits_truncate(mode),
        makedev(major.into(), minor.into()),
    )?;
    Ok(())
}

/// Owner, then mode (chown clears set-id bits), then times.
fn set_metadata(
    dest: &Path,
    header: &tar::Header,
    mode: u32,
    kind: EntryType,
    as_root: bool,
) -> anyhow::Result<()> {
    if as_root {
        let uid = u32::try_from(header.uid()?).context("uid out of range")?;
        let gid = u32::try_from(header.gid()?).context("gid out of range")?;
        std::os::unix::fs::lchown(dest, Some(uid), Some(gid))?;
    }
    if kind != EntryType::Symlink {
        fs::set_permissions(dest, fs::Permissions::from_mode(mode))?;
    }
    if kind != EntryType::Directory {
        // Directories' times change again as later entries land in them,
        // and nothing depends on them; files' times matter (make, .pyc).
        let mtime = filetime::FileTime::from_unix_time(header.mtime()? as i64, 0);
        filetime::set_symlink_file_times(dest, mtime, mtime)?;
    }
    Ok(())
}
