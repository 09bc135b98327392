//! Progress reports of long builds and imports, and the relay that lets
//! blocking work on another thread report to a caller's `&dyn Progress`.

use tokio::sync::mpsc;

/// Receives progress of a build or an import. The CLI draws a bar on a
/// terminal and prints plain lines otherwise.
pub trait Progress: Send + Sync {
    /// A new stage began (`bootstrap`, `steps`, `finalize`, `verify`, ...).
    fn stage(&self, what: &str);
    /// Bytes processed in the current stage, out of `total` when known.
    fn bytes(&self, done: u64, total: Option<u64>);
    /// One line of a tool's output (mmdebstrap's), for a status line.
    fn detail(&self, _line: &str) {}
}

/// Reports nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn stage(&self, _what: &str) {}
    fn bytes(&self, _done: u64, _total: Option<u64>) {}
}

enum Event {
    Stage(String),
    Bytes(u64, Option<u64>),
    Detail(String),
}

/// A [`Progress`] that forwards to another thread's [`Progress`].
pub(crate) struct Relay(mpsc::UnboundedSender<Event>);

impl Progress for Relay {
    fn stage(&self, what: &str) {
        let _ = self.0.send(Event::Stage(what.to_owned()));
    }
    fn bytes(&self, done: u64, total: Option<u64>) {
        let _ = self.0.send(Event::Bytes(done, total));
    }
    fn detail(&self, line: &str) {
        let _ = self.0.send(Event::Detail(line.to_owned()));
    }
}

/// Runs `work` on the blocking pool, forwarding its reports to `progress`
/// on this task. (The caller's `&dyn Progress` cannot cross to another
/// thread by itself: it is borrowed, not `'static`.)
pub(crate) async fn blocking<T, F>(progress: &dyn Progress, work: F) -> anyhow::Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Relay) -> anyhow::Result<T> + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = tokio::task::spawn_blocking(move || work(&Relay(tx)));
    // Ends when `work` returns and drops the relay.
    while let Some(event) = rx.recv().await {
        match event {
            Event::Stage(what) => progress.stage(&what),
            Event::Bytes(done, total) => progress.bytes(done, total),
            Event::Detail(line) => progress.detail(&line),
        }
    }
    task.await
        .map_err(|err| anyhow::anyhow!("image task failed: {err}"))?
}

/// Reports bytes read through it, at most once per MiB so a fast reader
/// does not flood the terminal.
pub(crate) struct CountingReader<'a, R> {
    pub inner: R,
    pub progress: &'a dyn Progress,
    pub done: u64,
    pub total: Option<u64>,
    reported: u64,
}

impl<'a, R> CountingReader<'a, R> {
    pub(super) fn new(inner: R, progress: &'a dyn Progress, done: u64, total: Option<u64>) -> Self {
        Self {
            inner,
            progress,
            done,
            total,
            reported: done,
        }
    }
}

const REPORT_EVERY: u64 = 1 << 20;

impl<R: std::io::Read> std::io::Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        if n == 0 || self.done - self.reported >= REPORT_EVERY {
            self.reported = self.done;
            self.progress.bytes(self.done, self.total);
        }
        Ok(n)
    }
}
