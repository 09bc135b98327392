//! Checkpoints of the state store's write-ahead log, on a thread of their
//! own.
//!
//! With `synchronous = NORMAL` a commit in WAL mode does not wait for the
//! disk; a checkpoint does (it syncs the log, copies it into the database
//! and syncs that). SQLite runs one automatically inside whichever commit
//! crosses 1,000 pages of log, on the calling thread: an async worker of
//! Garrison, holding the store's lock, so a disk busy with something else
//! stalled every session's next step for as long as the syncs took. Here
//! the automatic ones are off and this thread checkpoints every second
//! through its own connection, beside the writers.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};
use rusqlite::Connection;
use tracing::{info, warn};

/// How often the log is checkpointed.
const EVERY: Duration = Duration::from_secs(1);

/// Stops its thread when dropped (with the store).
pub(super) struct Checkpointer {
    _stop: mpsc::Sender<()>,
}

impl Checkpointer {
    /// Starts checkpointing the database at `path`; the caller turns the
    /// automatic checkpoints off only once this succeeded.
    pub(super) fn start(path: &Path) -> Result<Checkpointer> {
        let conn = Connection::open(path)
            .with_context(|| format!("opening {} to checkpoint it", path.display()))?;
        conn.busy_timeout(Duration::from_secs(10))?;
        let (stop, stopped) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("garrison-store-checkpoint".to_owned())
            .spawn(move || run(&conn, &stopped))
            .context("starting the store's checkpoint thread")?;
        Ok(Checkpointer { _stop: stop })
    }
}

fn run(conn: &Connection, stopped: &mpsc::Receiver<()>) {
    // A failure is told once until a checkpoint succeeds again: on a full
    // disk every one fails (the log keeps the commits; nothing is lost).
    let mut failing = false;
    // Ends when the store (the sender) is dropped.
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
        // PASSIVE: copies what no reader still needs, never waits for one.
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            Ok(()) if failing => {
                failing = false;
                info!("checkpointing the state store works again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                warn!(error = %e, "checkpointing the state store failed; the commits stay in its log and it is tried again every second");
            }
            Err(_) => {}
        }
    }
}
