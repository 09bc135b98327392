//! The SSE watch: replays the event log after the client's cursor, then
//! follows live changes, with keepalive comments, until the stream's time
//! is up (or a fault cuts it).

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

use crate::fleet_api::entry_json;
use crate::server::{ApiError, Shared};
use crate::state::{Cursor, StateError};

/// Events sent per log read; more are read right after.
const BATCH: usize = 256;

type Frame = Result<Bytes, Infallible>;

/// Starts a watch of `outpost_id` after `cursor` (none: from the beginning).
/// A bad or expired cursor is answered with a status, not a broken stream.
pub(crate) fn stream(
    shared: Arc<Shared>,
    outpost_id: String,
    cursor: Option<&str>,
) -> Result<Response, ApiError> {
    let after = match cursor.filter(|c| !c.is_empty()) {
        None => 0,
        Some(c) => match Cursor::parse(c) {
            Some(Cursor::Event(seq)) => seq,
            _ => return Err(ApiError::bad_request("invalid watch cursor")),
        },
    };
    shared.with_state(|s, _| {
        if s.outpost_rec(&outpost_id).is_none() {
            return Err(StateError::NotFound("outpost".into()));
        }
        s.events_after(&outpost_id, after, 0).map(|_| ())
    })?;
    let (tx, rx) = mpsc::channel::<Frame>(64);
    // Subscribe before the pump's first log read, so no change falls between.
    let events = shared.events.subscribe();
    tokio::spawn(pump(shared, outpost_id, after, events, tx));
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

async fn pump(
    shared: Arc<Shared>,
    outpost_id: String,
    mut last: u64,
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
        let withhold = shared.faults().withhold_events;
        let batch = shared.with_state(|s, _| s.events_after(&outpost_id, last, BATCH));
        let Ok((batch, scanned)) = batch else {
            // The log moved past our cursor: end the stream, the client
            // reconnects, gets 410 and relists.
            return;
        };
        last = scanned;
        let full = batch.len() >= BATCH;
        if !withhold {
            for event in batch {
                let data = json!({
                    "type": event.kind.as_str(),
                    "object": entry_json(&shared, &event.object, true),
                    "cursor": Cursor::Event(event.seq).encode(),
                });
                if tx
                    .send(Ok(Bytes::from(format!("data: {data}\n\n"))))
                    .await
                    .is_err()
                {
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
            _ = crate::server::stopped(&mut shutdown) => return,
            _ = tx.closed() => return,
        }
    }
}
