//! A restore spread over several `tar -x` processes.
//!
//! Extracting a workspace of many small files is almost all kernel work per
//! file (create, write, chown, chmod, utimes, close), and one `tar` does it
//! on one core. Here one reader decompresses the archive and deals its
//! regular files out to several `tar -x` workers, each fed a valid archive
//! of its own; everything else (directories, symbolic and hard links,
//! devices, FIFOs, overlayfs whiteouts) goes to one last `tar -x` that runs
//! after the workers have finished.
//!
//! Why that split is safe with an archive the sandbox shaped:
//! - every worker is GNU tar, with its own checks of each member's name
//!   (no absolute names, no `..`), exactly as a single `tar` would apply;
//! - the workers only ever see regular files and the directories they make
//!   on the way to them, so no symbolic link the archive holds exists while
//!   they write: none can redirect a worker's write (the single `tar` gets
//!   the same from delaying such links to its end);
//! - the last pass applies every directory's owner, mode, mtime and extended
//!   attributes after the workers' files are in it, as a single `tar` does
//!   at its end, and makes the links, whose targets now exist.
//!
//! A member whose name (or link target) is as long as the host's
//! `PATH_MAX` or longer cannot be made by any `tar` (each names it whole to
//! the kernel, which refuses it with ENAMETOOLONG, and says so for every
//! member below it): the restore stops at the first one with
//! [`SandboxError::Unrestorable`] instead of producing a message per member.
//!
//! A member the splitter does not expect in a snapshot (a global pax
//! header, old GNU sparse or multi-volume headers, a link or directory with
//! data) stops it with an error: the caller then restores serially, so the
//! fast path never fails a restore the plain one would make.
//!
//! Files of one directory go to the same worker: creating entries in one
//! directory is serialised by the kernel's lock on it, so two workers in one
//! directory mostly wait for each other.
//!
//! The dealer makes each file's parent directories before the file reaches
//! a worker, so no worker makes a directory. Two workers that both need one
//! would race to make it, and GNU tar before 1.35 gives up on a file whose
//! missing parents another process made between its failed open and its own
//! `mkdir` ("Cannot open: No such file or directory"). Making them here is
//! as safe as a worker making them: the names are the ones tar would make,
//! nothing but regular files and directories exists below `upper` until the
//! last pass, and that pass sets every directory's metadata.
//!
//! Fewer system calls per file, too: files owned by root go to workers
//! that run with `--no-same-owner`, which then neither chown nor chmod each
//! file (a worker runs as root, creates no set-group-id directory, and
//! opens each file with its mode), and every worker reads records of 128
//! KiB, so a small file is one write instead of two. Four calls per file
//! remain (open, write, utimes, close) of seven.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use anyhow::{Context, bail, ensure};

use super::UNTAR_FLAGS;
use super::watchdog::Watchdog;
use members::*;
use sandbox::bounded_output::{Tail, tail_on_thread};

mod members;

/// The end of an archive: two zero blocks.
const END: [u8; 2 * BLOCK] = [0; 2 * BLOCK];
/// Largest pax or GNU long-name header taken (names and extended
/// attributes; far above what ext4 lets one file hold).
const MAX_META: u64 = 16 << 20;
/// Bytes handed to a worker at once, and how many may wait for it: enough
/// that a directory's files queue for one worker while the reader deals the
/// next directory to another.
const CHUNK: usize = 256 << 10;
const QUEUED_CHUNKS: usize = 16;
/// Blocks per record a worker reads: most small files fit in one.
const BLOCKING_FACTOR: &str = "256";

/// How many workers of each kind (root's files, others') a restore uses on
/// this machine.
pub(super) fn workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 4)
}

/// Restores `archive` (zstd-compressed tar, as `pack` makes) into the empty
/// `upper` with up to `workers` tar processes for files owned by root and as
/// many for the others, then one for the rest. `scratch` is a private
/// directory for the last pass's spool. `dog` kills the tars when the
/// restore's time bound passes.
pub(super) fn unpack(
    archive: &Path,
    upper: &Path,
    scratch: &Path,
    workers: usize,
    dog: &Watchdog,
) -> anyhow::Result<()> {
    ensure!(workers > 0, "a restore needs at least one worker");
    let input = File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let decoder = zstd::stream::read::Decoder::new(input).context("reading the archive")?;
    let mut input = BufReader::with_capacity(1 << 20, decoder);

    let mut pool = Pool::new(upper, dog, workers);
    let mut rest_out = BufWriter::with_capacity(1 << 20, spool(scratch, "restore-rest.tar")?);

    let dealt = deal(&mut input, &mut pool, &mut rest_out);
    // Whatever happened, every worker gets the end of its archive and is
    // waited for: no process outlives the restore.
    let finished: Vec<anyhow::Result<()>> =
        pool.workers.into_iter().map(|w| w.finish(dog)).collect();
    dealt?;
    for result in finished {
        result?;
    }
    // The rest of the stream (the end blocks' padding) is read so a short
    // archive cannot pass for a whole one, and nothing after the end counts.
    io::copy(&mut input, &mut io::sink()).context("reading the archive to its end")?;

    rest_out.write_all(&END)?;
    let rest = rest_out.into_inner().map_err(|e| e.into_error())?;
    last_pass(rest, upper, dog)
}

/// Reads every member and sends it where it belongs.
fn deal(input: &mut impl Read, pool: &mut Pool, rest: &mut impl Write) -> anyhow::Result<()> {
    let mut meta: Vec<u8> = Vec::new();
    let mut next = Pending::default();
    let mut header = [0u8; BLOCK];
    loop {
        ensure!(!pool.dog.expired(), "the restore ran out of time");
        if !read_block(input, &mut header)? {
            bail!("the archive ends without its end marker");
        }
        if header.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let own_size = number(&header[124..136]).context("a member's size")?;
        match header[156] {
            kind @ (b'x' | b'L' | b'K') => {
                ensure!(
                    own_size <= MAX_META,
                    "an extended header of {own_size} bytes is more than a snapshot holds"
                );
                meta.extend_from_slice(&header);
                let start = meta.len();
                copy_exact(input, &mut meta, padded(own_size))?;
                let data = &meta[start..start + own_size as usize];
                match kind {
                    b'x' => next.pax(data)?,
                    b'L' => next.name = Some(c_string(data).to_vec()),
                    _ => next.link = Some(c_string(data).to_vec()),
                }
            }
            b'0' | 0 | b'7' => {
                let size = next.size.unwrap_or(own_size);
                let name = next
                    .sparse_name
                    .take()
                    .or_else(|| next.name.take())
                    .unwrap_or_else(|| ustar_name(&header));
                makeable(&name)?;
                let uid = next.uid.map_or_else(|| number(&header[108..116]), Ok)?;
                let gid = next.gid.map_or_else(|| number(&header[116..124]), Ok)?;
                pool.make_parents(&name);
                let home = pool.home_of(&name, uid == 0 && gid == 0)?;
                let worker = &mut pool.workers[home];
                worker.send(&meta)?;
                worker.send(&header)?;
                worker.stream(input, padded(size))?;
                worker.dealt += size;
                meta.clear();
                next = Pending::default();
            }
            b'1'..=b'6' => {
                let size = next.size.unwrap_or(own_size);
                ensure!(
                    size == 0,
                    "a member of type {:?} with {size} bytes of data",
                    header[156] as char
                );
                makeable(&next.name.take().unwrap_or_else(|| ustar_name(&header)))?;
                makeable(
                    &next
                        .link
                        .take()
                        .unwrap_or_else(|| c_string(&header[157..257]).to_vec()),
                )?;
                rest.write_all(&meta)?;
                rest.write_all(&header)?;
                meta.clear();
                next = Pending::default();
            }
            // A global pax header ('g') would reach only the workers
            // started before it, and could change owners the dealing
            // depends on: like every type snapshots do not hold, it is
            // left to one tar.
            other => bail!(
                "a member of type {:?}, which snapshots do not hold",
                other as char
            ),
        }
    }
}

/// The workers, started as files need them: up to `per_kind` for files
/// owned by root and as many for the others.
struct Pool<'a> {
    workers: Vec<Worker>,
    per_kind: usize,
    upper: &'a Path,
    dog: &'a Watchdog,
    /// Worker of each directory (by a hash of its name and the kind).
    homes: HashMap<u64, usize>,
    /// Parent directories already made (by name as the archive gives it).
    made: HashSet<Vec<u8>>,
}

impl<'a> Pool<'a> {
    fn new(upper: &'a Path, dog: &'a Watchdog, per_kind: usize) -> Self {
        Self {
            workers: Vec::new(),
            per_kind,
            upper,
            dog,
            homes: HashMap::new(),
            made: HashSet::new(),
        }
    }

    /// Makes the directories above `name` below `upper`, once per parent.
    /// A name with a `..` component is left alone, as is any failure: the
    /// worker's tar then refuses or reports the member exactly as a single
    /// tar would.
    fn make_parents(&mut self, name: &[u8]) {
        let Some(parent) = parent_of(name) else {
            return;
        };
        if self.made.contains(parent) {
            return;
        }
        self.made.insert(parent.to_vec());
        let mut path = self.upper.to_path_buf();
        for part in parent.split(|&b| b == b'/') {
            match part {
                b"" | b"." => {}
                b".." => return,
                part => path.push(OsStr::from_bytes(part)),
            }
        }
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&path);
    }

    /// The worker that writes `name`: the one its directory was given to,
    /// or a new one while there are fewer than `per_kind`, or else the one
    /// with the fewest bytes so far.
    fn home_of(&mut self, name: &[u8], root_owned: bool) -> anyhow::Result<usize> {
        let parent = parent_of(name).unwrap_or(b"");
        let mut hasher = DefaultHasher::new();
        (parent, root_owned).hash(&mut hasher);
        let key = hasher.finish();
        let index = match self.homes.get(&key) {
            Some(&index) => index,
            None => {
                let kind = || {
                    self.workers
                        .iter()
                        .enumerate()
                        .filter(|(_, w)| w.root_owned == root_owned)
                };
                let index = if kind().count() < self.per_kind {
                    let index = self.workers.len();
                    self.workers
                        .push(Worker::start(self.upper, self.dog, index, root_owned)?);
                    index
                } else {
                    kind()
                        .min_by_key(|(_, w)| w.dealt)
                        .map(|(i, _)| i)
                        .unwrap_or(0)
                };
                self.homes.insert(key, index);
                index
            }
        };
        Ok(index)
    }
}

/// The directory part of a member's name, if it has one.
fn parent_of(name: &[u8]) -> Option<&[u8]> {
    let trimmed = name.strip_suffix(b"/").unwrap_or(name);
    let slash = trimmed.iter().rposition(|&b| b == b'/')?;
    Some(&trimmed[..slash])
}

/// One `tar -x` and the thread that feeds it.
struct Worker {
    /// Takes only files owned by root, and sets no owner.
    root_owned: bool,
    tar: Child,
    messages: Option<JoinHandle<Tail>>,
    queue: Option<SyncSender<Vec<u8>>>,
    feeder: Option<JoinHandle<io::Result<()>>>,
    buffer: Vec<u8>,
    /// Bytes of file data dealt to it.
    dealt: u64,
}

impl Worker {
    fn start(upper: &Path, dog: &Watchdog, index: usize, root_owned: bool) -> anyhow::Result<Self> {
        let mut tar = untar(upper);
        tar.args(["-b", BLOCKING_FACTOR]);
        if root_owned {
            tar.arg("--no-same-owner");
        }
        let (mut tar, messages) = spawn(tar.stdin(Stdio::piped()), dog)?;
        let mut stdin = tar.stdin.take().context("tar's stdin")?;
        let (queue, chunks) = sync_channel::<Vec<u8>>(QUEUED_CHUNKS);
        let feeder = std::thread::Builder::new()
            .name(format!("restore-{index}"))
            .spawn(move || {
                for chunk in chunks {
                    stdin.write_all(&chunk)?;
                }
                stdin.write_all(&END)
            })?;
        Ok(Self {
            root_owned,
            tar,
            messages: Some(messages),
            queue: Some(queue),
            feeder: Some(feeder),
            buffer: Vec::with_capacity(CHUNK),
            dealt: 0,
        })
    }

    fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Copies `len` bytes of `input` to the worker.
    fn stream(&mut self, input: &mut impl Read, mut len: u64) -> anyhow::Result<()> {
        while len > 0 {
            let room = CHUNK.saturating_sub(self.buffer.len()).max(BLOCK);
            let take = (room as u64).min(len);
            copy_exact(input, &mut self.buffer, take)?;
            len -= take;
            if self.buffer.len() >= CHUNK {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK));
        let queue = self.queue.as_ref().context("the worker was finished")?;
        if queue.send(chunk).is_err() {
            // The feeder stopped: its tar is gone; `finish` says why.
            bail!("a restore worker stopped early");
        }
        Ok(())
    }

    /// Ends the worker's archive and waits for its tar.
    fn finish(mut self, dog: &Watchdog) -> anyhow::Result<()> {
        let flushed = if self.buffer.is_empty() {
            Ok(())
        } else {
            self.flush()
        };
        drop(self.queue.take());
        let fed = self.feeder.take().map(|f| {
            f.join()
                .unwrap_or_else(|_| Err(io::Error::other("panicked")))
        });
        let status = dog.wait(&mut self.tar).context("waiting for tar")?;
        let messages = self.messages.take().map(|m| m.join());
        if !status.success() {
            bail!("tar failed ({status}): {}", text(messages));
        }
        flushed?;
        if let Some(fed) = fed {
            fed.context("feeding tar")?;
        }
        Ok(())
    }
}

/// Makes the links, devices and directories' metadata once every file is in.
fn last_pass(rest: File, upper: &Path, dog: &Watchdog) -> anyhow::Result<()> {
    let mut rest = rest;
    rest.rewind()?;
    let (mut tar, messages) = spawn(untar(upper).stdin(rest), dog)?;
    let status = dog.wait(&mut tar).context("waiting for tar")?;
    let messages = messages.join();
    if !status.success() {
        bail!("tar failed ({status}): {}", text(Some(messages)));
    }
    Ok(())
}

/// A `tar -x` into `upper` that reads the archive from its standard input;
/// more options may follow.
fn untar(upper: &Path) -> Command {
    let mut tar = Command::new("tar");
    tar.args(UNTAR_FLAGS)
        .args(["-xpf", "-", "-C"])
        .arg(upper)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    tar
}

/// Starts `tar` under `dog`, with a thread keeping the tail of its
/// messages (read to their end, so it never blocks on them).
fn spawn(tar: &mut Command, dog: &Watchdog) -> anyhow::Result<(Child, JoinHandle<Tail>)> {
    let mut child = tar.spawn().context("running tar")?;
    dog.watch(&mut child);
    let stderr = child.stderr.take().context("tar's stderr")?;
    Ok((child, tail_on_thread(stderr)?))
}

/// What a tar said, bounded.
fn text(messages: Option<std::thread::Result<Tail>>) -> String {
    match messages {
        Some(Ok(tail)) => tail.text(),
        _ => String::new(),
    }
}

/// A private (0600) file in `scratch` whose name goes at once: it lives as
/// long as its handle, and a crash leaves nothing behind.
fn spool(scratch: &Path, name: &str) -> anyhow::Result<File> {
    let path = scratch.join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let _ = std::fs::remove_file(&path);
    Ok(file)
}

#[cfg(test)]
mod tests;
