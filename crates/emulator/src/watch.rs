//! The SSE watch: sends the outpost's (or, unfiltered, the account's) rows at or after the client's cursor
//! in keyset order (the row at the cursor again: at-least-once), then
//! follows live changes, with keepalive comments, until the stream's time
//! is up (or a fault cuts it).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use crate::faults;
use crate::http::ApiError;
use crate::render::entry_json;
use crate::shared::{Shared, stopped};
use crate::state::{Change, Stamp, StateError};

/// Events sent per log read; more are read right after.
const BATCH: usize = 256;

type Frame = Result<Bytes, Infallible>;

/// Starts a watch of `outpost_id` (none: the whole account) from
/// `cursor` (none: from the beginning). A bad cursor is answered 400 and an expired one 410, before
/// the stream starts.
pub(crate) fn stream(
    shared: Arc<Shared>,
    outpost_id: Option<String>,
    cursor: Option<&str>,
) -> Result<Response, ApiError> {
    let from = match cursor.filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => {
            Some(Stamp::parse_cursor(c).ok_or_else(|| ApiError::bad_request("invalid cursor"))?)
        }
    };
    let epoch = shared.with_state(|s, _| {
        s.changes_from(outpost_id.as_deref(), from, |_, _| true, 0)?;
        Ok::<_, StateError>(s.log.epoch())
    })?;
    let (tx, rx) = mpsc::channel::<Frame>(64);
    // Subscribe before the pump's first read, so no change falls between.
    let events = shared.events.subscribe();
    let watcher = Watcher {
        outpost_id,
        cursor: from,
        sent: HashMap::new(),
        epoch,
    };
    tokio::spawn(pump(shared, watcher, events, tx));
    let mut resp = Response::new(Body::from_stream(ReceiverStream::new(rx)));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// One stream's position: the last row sent, and what was sent at which
/// `updated_at` (so the `>=` boundary does not resend within a stream).
struct Watcher {
    outpost_id: Option<String>,
    cursor: Option<Stamp>,
    sent: HashMap<String, Stamp>,
    epoch: u64,
}

impl Watcher {
    /// The next batch under the lock; `None` ends the stream (its cursor
    /// expired: the client reconnects, gets 410 and lists).
    fn next_batch(&self, shared: &Shared) -> Option<Vec<Change>> {
        shared.with_state(|s, _| {
            if s.log.epoch() != self.epoch {
                return None;
            }
            let sent = |id: &str, stamp: Stamp| self.sent.get(id) == Some(&stamp);
            s.changes_from(self.outpost_id.as_deref(), self.cursor, sent, BATCH)
                .ok()
        })
    }
}

async fn pump(
    shared: Arc<Shared>,
    mut w: Watcher,
    mut events: broadcast::Receiver<u64>,
    tx: mpsc::Sender<Frame>,
) {
    let mut shutdown = shared.shutdown.subscribe();
    let keepalive = shared.config.keepalive.max(Duration::from_millis(1));
    let mut lifetime = shared.config.max_stream;
    if let Some(cut) = shared.faults().cut_watch_every_secs {
        lifetime = lifetime.min(Duration::from_secs(cut));
    }
    let end = Instant::now() + lifetime;
    let mut next_keepalive = Instant::now() + keepalive;
    loop {
        let faults = shared.faults();
        let Some(batch) = w.next_batch(&shared) else {
            return;
        };
        let full = batch.len() >= BATCH;
        for change in batch {
            w.cursor = Some(change.stamp);
            w.sent
                .insert(change.object.session_id().to_owned(), change.stamp);
            if faults.withhold_events {
                continue;
            }
            let data = json!({
                "type": change.kind.as_str(),
                "object": entry_json(&shared, &change.object, true),
                "cursor": change.stamp.cursor(),
            });
            let frame = Bytes::from(format!("data: {data}\n\n"));
            // At-least-once delivery, on demand: the same event twice.
            let copies = if faults::roll(faults.duplicate_event_rate) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                if tx.send(Ok(frame.clone())).await.is_err() {
                    return;
                }
            }
        }
        if full {
            continue;
        }
        tokio::select! {
            r = events.recv() => {
                if matches!(r, Err(broadcast::error::RecvError::Closed)) {
                    return;
                }
            }
            _ = tokio::time::sleep_until(next_keepalive) => {
                if tx.send(Ok(Bytes::from_static(b": keepalive\n\n"))).await.is_err() {
                    return;
                }
                next_keepalive = Instant::now() + keepalive;
            }
            _ = tokio::time::sleep_until(end) => return,
            _ = stopped(&mut shutdown) => return,
            _ = tx.closed() => return,
        }
    }
}
