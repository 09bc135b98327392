//! One PTY session's shared half: the output kept for clients that attach
//! (again), the child's stdin, and the signal that closes attached
//! websockets. The sandbox's state holds these; `pty` drives them.

use std::sync::Mutex;

use tokio::sync::watch;

/// Output kept per session; older bytes are dropped.
const MAX_BUFFER: usize = 8 << 20;

#[derive(Default)]
pub(super) struct Output {
    pub(super) bytes: Vec<u8>,
    /// Offset of `bytes[0]` in the whole output.
    pub(super) base: usize,
    /// How far clients have received.
    pub(super) delivered: usize,
    pub(super) exit: Option<i32>,
}

/// One PTY session.
pub(crate) struct PtySession {
    /// Its process group (id: the PTY process's pid), signalled only while
    /// it is its own.
    pub group: crate::group::Group,
    pub(super) token: String,
    pub(super) output: Mutex<Output>,
    pub(super) changed: watch::Sender<u64>,
    pub(super) stdin: tokio::sync::Mutex<Option<tokio::process::ChildStdin>>,
    /// Set to a reason to close attached websockets.
    pub(super) kicked: watch::Sender<Option<String>>,
}

impl PtySession {
    /// Closes attached websockets (the session itself lives on).
    pub(crate) fn kick(&self, reason: &str) {
        self.kicked.send_replace(Some(reason.to_owned()));
    }

    pub(super) fn push(&self, data: &[u8]) {
        let mut out = self.output.lock().expect("pty");
        out.bytes.extend_from_slice(data);
        if out.bytes.len() > MAX_BUFFER {
            let excess = out.bytes.len() - MAX_BUFFER;
            out.bytes.drain(..excess);
            out.base += excess;
        }
        drop(out);
        self.changed.send_modify(|v| *v += 1);
    }
}
