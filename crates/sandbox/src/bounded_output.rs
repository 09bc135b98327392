//! What Garrison reads back from the helper processes it runs (tar, zstd,
//! runc, runsc, mkfs, nft, ip, git), and the error text it keeps, bounded.
//!
//! A helper's messages can be shaped by a sandbox: `tar` names every member
//! it cannot restore, and the names are the session's. Read whole, one
//! crafted snapshot of 93 KB made `tar` write 150 MB of messages, which
//! went into an error, the log, `events.log` and the state store on every
//! attempt. So every child's stderr is read to its end (the child never
//! blocks on a full pipe) but only its last [`STDERR_TAIL`] bytes are kept,
//! with a note of how much was cut before them; stdout that a caller parses
//! is kept up to [`STDOUT_MAX`]; and [`clip`] bounds any text that is
//! stored or logged.

use std::io::{self, Read};
use std::process::ExitStatus;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of a helper's stderr kept: the end, where the reason is.
pub const STDERR_TAIL: usize = 4 << 10;
/// Bytes of a helper's stdout kept for its caller to parse (`ip -j`, `nft
/// -j`, `runc state`): far above what they print on a busy host.
pub const STDOUT_MAX: usize = 16 << 20;
/// Bytes of error text stored or logged at most ([`clip`]).
pub const ERROR_MAX: usize = 8 << 10;

const READ_CHUNK: usize = 8 << 10;

/// The last bytes of a stream, and how many came before them.
#[derive(Clone, Debug)]
pub struct Tail {
    kept: Vec<u8>,
    cap: usize,
    cut: u64,
}

impl Tail {
    /// Keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            kept: Vec::new(),
            cap,
            cut: 0,
        }
    }

    /// Appends `data`, dropping the oldest bytes beyond the cap.
    pub fn push(&mut self, data: &[u8]) {
        if data.len() >= self.cap {
            self.cut += (self.kept.len() + data.len() - self.cap) as u64;
            self.kept.clear();
            self.kept.extend_from_slice(&data[data.len() - self.cap..]);
            return;
        }
        let overflow = (self.kept.len() + data.len()).saturating_sub(self.cap);
        if overflow > 0 {
            self.kept.drain(..overflow);
            self.cut += overflow as u64;
        }
        self.kept.extend_from_slice(data);
    }

    /// Bytes dropped before the kept tail.
    pub fn cut(&self) -> u64 {
        self.cut
    }

    /// The bytes kept.
    pub fn bytes(&self) -> &[u8] {
        &self.kept
    }

    /// The kept tail as text, trimmed, saying where it was cut.
    pub fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.kept);
        let text = text.trim();
        if self.cut == 0 {
            text.to_owned()
        } else {
            format!("[{} earlier bytes cut] {text}", self.cut)
        }
    }
}

/// The first bytes of a stream, and how many came after them.
#[derive(Clone, Debug)]
pub struct Head {
    /// The first bytes, up to the cap.
    pub kept: Vec<u8>,
    cap: usize,
    /// Bytes dropped after the kept head.
    pub cut: u64,
}

impl Head {
    /// Keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            kept: Vec::new(),
            cap,
            cut: 0,
        }
    }

    /// Keeps what fits of `data` after what is kept already.
    pub fn push(&mut self, data: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len()).min(data.len());
        self.kept.extend_from_slice(&data[..room]);
        self.cut += (data.len() - room) as u64;
    }
}

/// Reads `reader` to its end, keeping the last `cap` bytes.
pub async fn read_tail(mut reader: impl AsyncRead + Unpin, cap: usize) -> io::Result<Tail> {
    let mut tail = Tail::new(cap);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return Ok(tail),
            Ok(n) => tail.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads `reader` to its end, keeping the first `cap` bytes.
pub async fn read_head(mut reader: impl AsyncRead + Unpin, cap: usize) -> io::Result<Head> {
    let mut head = Head::new(cap);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => return Ok(head),
            Ok(n) => head.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Reads `reader` to its end on this thread, keeping the last `cap` bytes.
pub fn read_tail_blocking(mut reader: impl Read, cap: usize) -> io::Result<Tail> {
    let mut tail = Tail::new(cap);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(tail),
            Ok(n) => tail.push(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The last `cap` bytes of the file at `path` (a helper's log), read
/// without following a symbolic link.
pub fn file_tail(path: &std::path::Path, cap: usize) -> io::Result<Tail> {
    use std::io::Seek;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(cap as u64);
    file.seek(io::SeekFrom::Start(start))?;
    let mut tail = read_tail_blocking(file.take(cap as u64), cap)?;
    tail.cut = start;
    Ok(tail)
}

/// Drains `reader` on a thread of its own, keeping its last
/// [`STDERR_TAIL`] bytes: for a blocking child whose stdin the caller feeds.
pub fn tail_on_thread(
    reader: impl Read + Send + 'static,
) -> io::Result<std::thread::JoinHandle<Tail>> {
    std::thread::Builder::new()
        .name("helper-stderr".into())
        .spawn(move || {
            read_tail_blocking(reader, STDERR_TAIL).unwrap_or_else(|_| Tail::new(STDERR_TAIL))
        })
}

/// What a finished helper left: its status, its stdout's head and its
/// stderr's tail.
#[derive(Debug)]
pub struct Output {
    /// How the helper exited.
    pub status: ExitStatus,
    /// Up to [`STDOUT_MAX`] bytes (empty when stdout was not piped).
    pub stdout: Vec<u8>,
    /// Stdout bytes past [`STDOUT_MAX`], dropped.
    pub stdout_cut: u64,
    /// The last bytes of its stderr.
    pub stderr: Tail,
}

impl Output {
    /// The stderr tail, for an error message.
    pub fn stderr_text(&self) -> String {
        self.stderr.text()
    }
}

/// `wait_with_output`, bounded: waits for `child` while reading whatever
/// of its stdout and stderr were piped, keeping [`STDOUT_MAX`] of the one
/// and [`STDERR_TAIL`] of the other.
pub async fn wait_with_output(mut child: tokio::process::Child) -> io::Result<Output> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out = async {
        match stdout {
            Some(pipe) => read_head(pipe, STDOUT_MAX).await,
            None => Ok(Head::new(0)),
        }
    };
    let err = async {
        match stderr {
            Some(pipe) => read_tail(pipe, STDERR_TAIL).await,
            None => Ok(Tail::new(0)),
        }
    };
    let (out, err, status) = tokio::join!(out, err, child.wait());
    let (out, err) = (out?, err?);
    Ok(Output {
        status: status?,
        stdout: out.kept,
        stdout_cut: out.cut,
        stderr: err,
    })
}

/// Runs `command` to its end with stdin null and stdout and stderr piped
/// and bounded (the replacement for `Command::output`).
pub async fn output(command: &mut tokio::process::Command) -> io::Result<Output> {
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    wait_with_output(child).await
}

/// The blocking twin of [`output`], for callers outside the runtime
/// (`garrison doctor`).
pub fn output_blocking(command: &mut std::process::Command) -> io::Result<Output> {
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().map(tail_on_thread).transpose()?;
    let mut head = Head::new(STDOUT_MAX);
    if let Some(mut pipe) = child.stdout.take() {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => head.push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e);
                }
            }
        }
    }
    let status = child.wait()?;
    let stderr = stderr
        .map(|t| t.join().unwrap_or_else(|_| Tail::new(0)))
        .unwrap_or_else(|| Tail::new(0));
    Ok(Output {
        status,
        stdout: head.kept,
        stdout_cut: head.cut,
        stderr,
    })
}

/// `text` if it is at most `max` bytes, else its start and its end with a
/// note of how much was cut between them (an error's context is at its
/// start, its cause at its end).
pub fn clip(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!(
        "{} [… {} bytes cut …] {}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
    .into()
}

/// [`clip`] to [`ERROR_MAX`], the bound for error text kept anywhere.
pub fn clip_error(text: &str) -> String {
    clip(text, ERROR_MAX).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_end_and_counts_the_rest() {
        let mut tail = Tail::new(8);
        tail.push(b"0123");
        tail.push(b"456789");
        assert_eq!(tail.bytes(), b"23456789");
        assert_eq!(tail.cut(), 2);
        tail.push(&[b'x'; 20]);
        assert_eq!(tail.bytes(), &[b'x'; 8]);
        assert_eq!(tail.cut(), 2 + 8 + 12);
        assert!(tail.text().starts_with("[22 earlier bytes cut] "));
    }

    #[test]
    fn a_head_keeps_the_start() {
        let mut head = Head::new(4);
        head.push(b"ab");
        head.push(b"cdef");
        assert_eq!((head.kept.as_slice(), head.cut), (&b"abcd"[..], 2));
    }

    #[test]
    fn clip_keeps_both_ends_on_char_boundaries() {
        assert_eq!(clip("short", 10), "short");
        let long = format!("start:{}:end", "é".repeat(10_000));
        let clipped = clip(&long, 64);
        assert!(clipped.len() < 120, "{clipped}");
        assert!(clipped.starts_with("start:") && clipped.ends_with(":end"));
        assert!(clipped.contains("bytes cut"));
    }

    #[tokio::test]
    async fn a_flood_on_stderr_is_read_to_its_end_and_kept_small() {
        // 64 MiB of messages: the child must not block on a full pipe, and
        // what is kept is the tail.
        let out = output(tokio::process::Command::new("sh").args([
            "-c",
            "head -c 67108864 /dev/zero | tr '\\0' x >&2; echo done >&2; echo out; exit 3",
        ]))
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert!(out.stderr.bytes().len() <= STDERR_TAIL);
        assert!(out.stderr_text().ends_with("done"));
        assert_eq!(out.stderr.cut(), 64 * 1024 * 1024 + 5 - STDERR_TAIL as u64);
    }

    #[test]
    fn the_blocking_twin_is_bounded_too() {
        let out = output_blocking(std::process::Command::new("sh").args([
            "-c",
            "head -c 1048576 /dev/zero | tr '\\0' y >&2; head -c 20000000 /dev/zero",
        ]))
        .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout.len(), STDOUT_MAX);
        assert_eq!(out.stdout_cut, 20_000_000 - STDOUT_MAX as u64);
        assert_eq!(out.stderr.bytes().len(), STDERR_TAIL);
    }
}
