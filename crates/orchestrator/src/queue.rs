//! The queue view: one outpost's entries, kept current by list-then-watch
//! with a periodic re-list behind the watch.
//!
//! The watch is the fast path (a new entry reaches the planner within one
//! event); the re-list is the safety net for a stream that stays open but
//! withholds events, so a silent stream costs latency, never a session.
//!
//! [`QueueMode::Poll`] replaces both with a list every interval, the way
//! polling orchestrators discover work; it exists so `garrison bench queue`
//! can measure the difference with the same executor behind it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use fleet::{EventType, FleetClient, QueueEntry, WatchItem};
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::settings::QueueMode;
use crate::store::Store;

/// The latest known entry per session of one outpost.
pub struct QueueView {
    outpost_id: String,
    entries: Mutex<BTreeMap<String, QueueEntry>>,
    /// Bumped on every change; subscribers wake on it.
    generation: watch::Sender<u64>,
    /// When the view was last confirmed by the server (Unix ms).
    synced_at: AtomicI64,
    pub watch_reconnects: AtomicU64,
    pub relists: AtomicU64,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl QueueView {
    pub fn new(outpost_id: &str) -> Arc<Self> {
        Arc::new(Self {
            outpost_id: outpost_id.to_owned(),
            entries: Mutex::new(BTreeMap::new()),
            generation: watch::Sender::new(0),
            synced_at: AtomicI64::new(0),
            watch_reconnects: AtomicU64::new(0),
            relists: AtomicU64::new(0),
        })
    }

    pub fn outpost_id(&self) -> &str {
        &self.outpost_id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, QueueEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn snapshot(&self) -> BTreeMap<String, QueueEntry> {
        self.lock().clone()
    }

    pub fn get(&self, session_id: &str) -> Option<QueueEntry> {
        self.lock().get(session_id).cloned()
    }

    /// Whether the view has been filled by a list at least once.
    pub fn is_synced(&self) -> bool {
        self.synced_at.load(Ordering::Relaxed) > 0
    }

    pub fn synced_at(&self) -> i64 {
        self.synced_at.load(Ordering::Relaxed)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    fn mark_synced(&self) {
        self.synced_at.store(now_ms(), Ordering::Relaxed);
    }

    /// Records a fresh reading of one entry (a claim response or a get).
    pub fn upsert(&self, entry: QueueEntry) {
        // A claim response carries the connect token; the view is shared and
        // must not hold it.
        let mut entry = entry;
        entry.status.connect_token = None;
        self.lock().insert(entry.session_id().to_owned(), entry);
        self.bump();
    }

    pub fn remove(&self, session_id: &str) {
        if self.lock().remove(session_id).is_some() {
            self.bump();
        }
    }

    /// Replaces the whole view with a complete list.
    fn replace(&self, entries: Vec<QueueEntry>) {
        let map = entries
            .into_iter()
            .map(|e| (e.session_id().to_owned(), e))
            .collect();
        *self.lock() = map;
        self.mark_synced();
        self.bump();
    }

    fn apply(&self, event_type: &EventType, entry: QueueEntry) {
        match event_type {
            EventType::Deleted => self.remove(entry.session_id()),
            EventType::Added | EventType::Modified => self.upsert(entry),
            EventType::Unknown(other) => {
                debug!(event_type = %other, session_id = entry.session_id(), "ignoring unknown watch event type");
            }
        }
        self.mark_synced();
    }
}

/// Keeps `view` current until `stop` is cancelled: by list-then-watch, or
/// by polling when `mode` says so.
pub async fn run(
    client: FleetClient,
    view: Arc<QueueView>,
    store: Arc<Store>,
    relist_every: Duration,
    mode: QueueMode,
    stop: CancellationToken,
) {
    if let QueueMode::Poll(every) = mode {
        return poll(client, view, every, stop).await;
    }
    let outpost = view.outpost_id().to_owned();
    let cursor = loop {
        match relist(&client, &view).await {
            Ok(cursor) => break cursor,
            Err(e) => {
                warn!(outpost, error = %e, "listing the queue failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
    };
    if let Some(c) = &cursor
        && let Err(e) = store.save_cursor(&outpost, c)
    {
        warn!(error = %e, "saving the watch cursor failed");
    }
    info!(
        outpost,
        entries = view.lock().len(),
        "queue listed; watching"
    );

    let mut stream = client.watch_forever(&outpost, cursor);
    let mut relist_timer = tokio::time::interval(relist_every);
    relist_timer.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = relist_timer.tick() => {
                if let Err(e) = relist(&client, &view).await {
                    warn!(outpost, error = %e, "periodic re-list failed");
                }
            }
            item = stream.next() => match item {
                Some(WatchItem::Event(event)) => {
                    if let Some(c) = &event.cursor
                        && let Err(e) = store.save_cursor(&outpost, c)
                    {
                        warn!(error = %e, "saving the watch cursor failed");
                    }
                    view.apply(&event.event_type, event.object);
                }
                Some(WatchItem::Reconnected { reconnects, .. }) => {
                    view.watch_reconnects.fetch_add(1, Ordering::Relaxed);
                    debug!(outpost, reconnects, "watch reconnected");
                }
                Some(WatchItem::Disconnected { error: Some(e), retry_in }) => {
                    warn!(outpost, error = %e, retry_in_ms = retry_in.as_millis() as u64, "watch failed");
                }
                Some(WatchItem::Disconnected { error: None, .. }) => {}
                None => return,
            },
        }
    }
}

/// Lists the queue every `every` and never watches: a new entry waits for
/// the next list, on average half an interval.
async fn poll(client: FleetClient, view: Arc<QueueView>, every: Duration, stop: CancellationToken) {
    let outpost = view.outpost_id().to_owned();
    info!(
        outpost,
        every_ms = every.as_millis() as u64,
        "polling the queue (no watch)"
    );
    let mut timer = tokio::time::interval(every);
    // A slow list must not be followed by a burst of catch-up lists.
    timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = timer.tick() => {
                if let Err(e) = relist(&client, &view).await {
                    warn!(outpost, error = %e, "polling the queue failed");
                }
            }
        }
    }
}

async fn relist(
    client: &FleetClient,
    view: &QueueView,
) -> Result<Option<String>, fleet::FleetError> {
    let (entries, cursor) = client.list_all(view.outpost_id(), None, None).await?;
    view.relists.fetch_add(1, Ordering::Relaxed);
    view.replace(entries);
    Ok(cursor)
}
