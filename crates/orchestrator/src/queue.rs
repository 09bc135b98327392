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

pub(crate) mod refusal;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use fleet::{EventType, FleetClient, QueueEntry, SessionId, WatchItem};
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::settings::QueueMode;
use crate::store::Store;
use common::now_ms;
use refusal::Refusal;

/// The latest known entry per session of one outpost.
pub struct QueueView {
    outpost_id: String,
    entries: Mutex<BTreeMap<SessionId, QueueEntry>>,
    /// Bumped on every change; subscribers wake on it.
    generation: watch::Sender<u64>,
    /// Per session, bumped when that session's entry changes: a runner
    /// wakes for its own entry, not for each of a thousand others.
    session_generations: Mutex<HashMap<SessionId, watch::Sender<u64>>>,
    /// When the view was last confirmed by the server (Unix ms).
    synced_at: AtomicI64,
    /// Watch reconnections.
    pub watch_reconnects: AtomicU64,
    /// Full relists.
    pub relists: AtomicU64,
    /// Whether the fleet API's last word on this queue was a refusal that
    /// only an operator can fix (see [`refusal`]).
    pub refusal: Refusal,
}

impl QueueView {
    /// An empty view of `outpost_id`.
    pub fn new(outpost_id: &str) -> Arc<Self> {
        Arc::new(Self {
            outpost_id: outpost_id.to_owned(),
            entries: Mutex::new(BTreeMap::new()),
            generation: watch::Sender::new(0),
            session_generations: Mutex::new(HashMap::new()),
            synced_at: AtomicI64::new(0),
            watch_reconnects: AtomicU64::new(0),
            relists: AtomicU64::new(0),
            refusal: Refusal::default(),
        })
    }

    /// The outpost.
    pub fn outpost_id(&self) -> &str {
        &self.outpost_id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<SessionId, QueueEntry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every entry, by session id.
    pub fn snapshot(&self) -> BTreeMap<SessionId, QueueEntry> {
        self.lock().clone()
    }

    /// The entries `keep` accepts, copied: with a thousand sessions held,
    /// the claim loop copies only the few it may act on.
    pub fn snapshot_where(
        &self,
        keep: impl Fn(&QueueEntry) -> bool,
    ) -> BTreeMap<SessionId, QueueEntry> {
        self.lock()
            .iter()
            .filter(|(_, e)| keep(e))
            .map(|(id, e)| (id.clone(), e.clone()))
            .collect()
    }

    /// How many entries the view holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no entry is seen.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The session's entry, if seen.
    pub fn get(&self, session_id: &SessionId) -> Option<QueueEntry> {
        self.lock().get(session_id).cloned()
    }

    /// Whether the view has been filled by a list at least once.
    pub fn is_synced(&self) -> bool {
        self.synced_at.load(Ordering::Relaxed) > 0
    }

    /// When the view was last in sync.
    pub fn synced_at(&self) -> i64 {
        self.synced_at.load(Ordering::Relaxed)
    }

    /// Notified whenever the view changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Wakes when `session_id`'s entry changes (or a full list replaces
    /// the view); other entries' changes do not wake it.
    pub fn subscribe_session(&self, session_id: &SessionId) -> watch::Receiver<u64> {
        self.sessions_lock()
            .entry(session_id.clone())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    fn sessions_lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, watch::Sender<u64>>> {
        self.session_generations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Wakes the subscribers of these sessions; a sender nobody listens to
    /// any more (its runner ended) is dropped on the way.
    fn bump_sessions<'a>(&self, session_ids: impl IntoIterator<Item = &'a SessionId>) {
        let mut senders = self.sessions_lock();
        for id in session_ids {
            if let Some(tx) = senders.get(id) {
                if tx.receiver_count() == 0 {
                    senders.remove(id);
                } else {
                    tx.send_modify(|g| *g += 1);
                }
            }
        }
    }

    fn bump_every_session(&self) {
        let mut senders = self.sessions_lock();
        senders.retain(|_, tx| tx.receiver_count() > 0);
        for tx in senders.values() {
            tx.send_modify(|g| *g += 1);
        }
    }

    pub(crate) fn mark_synced(&self) {
        self.synced_at.store(now_ms(), Ordering::Relaxed);
    }

    /// Records a fresh reading of one entry (a claim response or a get).
    pub fn upsert(&self, entry: QueueEntry) {
        // A claim response carries the connect token; the view is shared and
        // must not hold it.
        let mut entry = entry;
        entry.status.connect_token = None;
        let id = entry.id().clone();
        let previous = self.lock().insert(id.clone(), entry.clone());
        // The watch echoes each claim and renewal already taken in from
        // its answer: an unchanged entry wakes nobody.
        if previous.as_ref() != Some(&entry) {
            self.bump_sessions([&id]);
            self.bump();
        }
    }

    /// Forgets the entry.
    pub fn remove(&self, session_id: &SessionId) {
        if self.lock().remove(session_id).is_some() {
            self.bump_sessions([session_id]);
            self.bump();
        }
    }

    /// Replaces the whole view with a complete list.
    fn replace(&self, entries: Vec<QueueEntry>) {
        let map: BTreeMap<SessionId, QueueEntry> =
            entries.into_iter().map(|e| (e.id().clone(), e)).collect();
        let first = !self.is_synced();
        let changed = {
            let mut current = self.lock();
            let changed = changed_ids(&current, &map);
            *current = map;
            changed
        };
        self.mark_synced();
        // Before the first list, a runner cannot tell a missing entry from
        // one not seen yet: the first list is news to every runner.
        if first {
            self.bump_every_session();
        } else {
            self.bump_sessions(&changed);
        }
        self.bump();
    }

    fn apply(&self, event_type: &EventType, entry: QueueEntry) {
        match event_type {
            EventType::Deleted => self.remove(entry.id()),
            EventType::Added | EventType::Modified => self.upsert(entry),
            EventType::Unknown(other) => {
                debug!(event_type = %other, session_id = entry.session_id(), "ignoring unknown watch event type");
            }
        }
        self.mark_synced();
    }
}

/// The sessions whose entry differs between two readings of the queue
/// (added, removed or changed).
fn changed_ids(
    before: &BTreeMap<SessionId, QueueEntry>,
    after: &BTreeMap<SessionId, QueueEntry>,
) -> Vec<SessionId> {
    let gone = before.keys().filter(|id| !after.contains_key(*id));
    let new_or_changed = after
        .iter()
        .filter(|(id, e)| before.get(*id) != Some(*e))
        .map(|(id, _)| id);
    gone.chain(new_or_changed).cloned().collect()
}

/// Keeps `view` current until `stop` is cancelled: by list-then-watch, or
/// by polling when `mode` says so.
pub(crate) async fn run(
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
    // The view lives in memory, so a (re)started Garrison lists first; the
    // cursor stored before a restart is where the watch goes on when the
    // list gave none.
    let stored = store.cursor(&outpost).unwrap_or_else(|e| {
        warn!(error = %e, "reading the stored watch cursor failed");
        None
    });
    let Some(listed) = list_until_ok(&client, &view, &stop).await else {
        return;
    };
    let cursor = watch_start(listed, stored);
    save_cursor(&store, &outpost, cursor.as_deref());
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
                if let Err(e) = relist(&client, &view).await
                    && !view.refusal.note(&outpost, client.api_url(), &e)
                {
                    warn!(outpost, error = %e, "periodic re-list failed");
                }
            }
            item = stream.next() => match item {
                Some(WatchItem::Event(event)) => {
                    let cursor = event.cursor.clone();
                    view.apply(&event.event_type, event.object);
                    // Only once applied: a restart must not skip an event
                    // whose cursor was saved but whose change was lost.
                    save_cursor(&store, &outpost, cursor.as_deref());
                }
                Some(WatchItem::Reconnected { reconnects, .. }) => {
                    view.watch_reconnects.fetch_add(1, Ordering::Relaxed);
                    // A new connection was accepted: token and outpost are
                    // good again. (Events on a stream opened before a
                    // refusal prove nothing, so they do not clear it.)
                    view.refusal.clear(&outpost);
                    debug!(outpost, reconnects, "watch reconnected");
                }
                Some(WatchItem::Disconnected { error: Some(fleet::FleetError::CursorExpired { .. }), .. }) => {
                    // Events were missed and watching from the beginning
                    // would replay the whole queue: list, then watch from
                    // the list's cursor, as the protocol says.
                    info!(outpost, "watch cursor expired; listing again");
                    let Some(listed) = list_until_ok(&client, &view, &stop).await else {
                        return;
                    };
                    save_cursor(&store, &outpost, listed.as_deref());
                    stream = client.watch_forever(&outpost, listed);
                }
                Some(WatchItem::Disconnected { error: Some(e), retry_in }) => {
                    if !view.refusal.note(&outpost, client.api_url(), &e) {
                        warn!(outpost, error = %e, retry_in_ms = retry_in.as_millis() as u64, "watch failed");
                    }
                }
                Some(WatchItem::Disconnected { error: None, .. }) => {}
                None => return,
            },
        }
    }
}

/// Lists until a list succeeds (every 2 s); `None` when stopped first.
async fn list_until_ok(
    client: &FleetClient,
    view: &QueueView,
    stop: &CancellationToken,
) -> Option<Option<String>> {
    loop {
        match relist(client, view).await {
            Ok(cursor) => return Some(cursor),
            Err(e) => {
                let outpost = view.outpost_id();
                if !view.refusal.note(outpost, client.api_url(), &e) {
                    warn!(outpost, error = %e, "listing the queue failed; retrying");
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = stop.cancelled() => return None,
                }
            }
        }
    }
}

/// Where the first watch starts: the fresh list's cursor, else the one
/// stored before a restart (a server that gave no final cursor would
/// otherwise make the watch replay from the beginning).
fn watch_start(list: Option<String>, stored: Option<String>) -> Option<String> {
    list.or(stored)
}

fn save_cursor(store: &Store, outpost: &str, cursor: Option<&str>) {
    if let Some(c) = cursor
        && let Err(e) = store.save_cursor(outpost, c)
    {
        // A full disk is told once, by the claim loops (see `room.rs`),
        // not at every event; the cursor is saved with the next one.
        if crate::store::is_out_of_space(&e) {
            tracing::debug!(error = %e, "saving the watch cursor failed");
        } else {
            warn!(error = %e, "saving the watch cursor failed");
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
                if let Err(e) = relist(&client, &view).await
                    && !view.refusal.note(&outpost, client.api_url(), &e)
                {
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
    view.refusal.clear(view.outpost_id());
    view.replace(entries);
    Ok(cursor)
}

#[cfg(test)]
mod tests;
