//! The queue watch: one SSE connection ([`FleetClient::watch`]) and a
//! reconnecting wrapper ([`FleetClient::watch_forever`]).
//!
//! The server ends every stream after at most five minutes and may cut it at
//! any time, so a watch is a sequence of connections, each resumed from the
//! cursor of the last event the caller processed. A connection that receives
//! no bytes at all (not even a `: keepalive` comment) for
//! [`ClientOptions::watch_idle_timeout`](crate::ClientOptions) is treated as
//! dead. A watch can also stay open and withhold events; that cannot be
//! detected here, so callers keep a periodic re-list behind it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::header;
use tokio::time::Instant;
use tracing::{debug, warn};
use url::Url;

use crate::client::{FleetClient, Raw, SCOPE_MACHINE, cursor_string, parse_entry};
use crate::error::{FleetError, MAX_SNIPPET_CHARS};
use crate::http;
use crate::sse::{Frame, SseParser};
use crate::stats::route;
use crate::wire::{EventType, WatchEvent};

/// One watch connection: events until the stream ends (`None`) or fails
/// (a final `Err`).
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, FleetError>> + Send>>;

/// The reconnecting watch. Never ends; drop it to stop watching.
pub type WatchForever = Pin<Box<dyn Stream<Item = WatchItem> + Send>>;

/// What [`FleetClient::watch_forever`] yields.
// Events are nearly every item, so boxing them would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum WatchItem {
    /// An event, in server order. Once the caller asks for the next item,
    /// this event counts as processed and its cursor is where a reconnect
    /// resumes.
    Event(WatchEvent),
    /// A connection ended. `error` is `None` when the server closed the
    /// stream normally (it does so at least every five minutes). The next
    /// attempt starts after `retry_in`. After
    /// [`FleetError::CursorExpired`] the next connection starts from the
    /// beginning of what the server keeps, since the cursor is useless; events
    /// were missed, so the caller should re-list. Errors such as
    /// [`FleetError::Unauthorized`] repeat forever; the caller decides when
    /// to give up by dropping the stream.
    Disconnected {
        /// Why it ended; `None` when the server closed it.
        error: Option<FleetError>,
        /// When the next attempt starts.
        retry_in: Duration,
    },
    /// A connection opened after a [`WatchItem::Disconnected`]. `reconnects`
    /// counts them (1 for the first); `cursor` is where it resumed. The very
    /// first connection is not announced.
    Reconnected {
        /// Reconnections so far, 1 for the first.
        reconnects: u64,
        /// Where the stream resumed.
        cursor: Option<String>,
    },
}

type ConnStream = Pin<Box<dyn Stream<Item = Result<ConnItem, FleetError>> + Send>>;

/// What one connection yields internally: more than the public stream, so
/// the reconnecting wrapper can see the connection open and advance its
/// cursor past events that were skipped.
#[derive(Debug)]
enum ConnItem {
    Connected,
    Event(Box<WatchEvent>),
    Skipped { cursor: Option<String> },
}

impl FleetClient {
    /// Opens ONE watch connection on `outpost`, from `cursor` (from the
    /// beginning when `None`; normally the cursor [`FleetClient::list_all`]
    /// returned). Events that fail to parse or validate are skipped with a
    /// warning. The stream ends when the server ends it; a failure (HTTP
    /// status, transport, idle timeout) is yielded as the last item.
    pub fn watch(&self, outpost: &str, cursor: Option<&str>) -> WatchStream {
        let conn = self.connection(outpost, cursor);
        Box::pin(conn.filter_map(|item| {
            futures::future::ready(match item {
                Ok(ConnItem::Event(event)) => Some(Ok(*event)),
                Ok(ConnItem::Connected | ConnItem::Skipped { .. }) => None,
                Err(e) => Some(Err(e)),
            })
        }))
    }

    /// Watches `outpost` forever, reconnecting from the last processed
    /// event's cursor with jittered exponential backoff
    /// ([`ClientOptions::watch_backoff`](crate::ClientOptions)), which starts
    /// over after a healthy connection (one that delivered an event or lived
    /// [`ClientOptions::watch_healthy_after`](crate::ClientOptions)).
    pub fn watch_forever(&self, outpost: &str, start_cursor: Option<String>) -> WatchForever {
        let state = Forever {
            client: self.clone(),
            outpost: outpost.to_owned(),
            cursor: start_cursor,
            conn: None,
            sleep: None,
            disconnected_once: false,
            reconnects: 0,
            failures: 0,
            opened_at: None,
            progressed: false,
        };
        Box::pin(futures::stream::unfold(state, |mut st| async move {
            let item = st.next_item().await;
            Some((item, st))
        }))
    }

    fn watch_url(&self, outpost: &str, cursor: Option<&str>) -> Result<Url, FleetError> {
        let mut url = self.url(&["devins"])?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("outpost", outpost);
            q.append_pair("watch", "true");
            if let Some(cursor) = cursor {
                q.append_pair("cursor", cursor);
            }
        }
        Ok(url)
    }

    fn connection(&self, outpost: &str, cursor: Option<&str>) -> ConnStream {
        let start = Conn::Start {
            client: self.clone(),
            url: self.watch_url(outpost, cursor),
        };
        Box::pin(futures::stream::unfold(start, Conn::step))
    }

    /// Sends the watch request and checks the status. The request has no
    /// whole-request timeout (the stream lives for minutes), so waiting for
    /// the response head is bounded here instead.
    async fn open_watch(&self, url: Url) -> Result<reqwest::Response, FleetError> {
        let opts = &self.inner.options;
        let stats = &self.inner.stats;
        stats.request(route::WATCH, false);
        let send = self
            .inner
            .http
            .get(url)
            .header(header::ACCEPT, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .send();
        let timed_out = FleetError::Timeout {
            route: route::WATCH,
            what: "request",
            after: opts.request_timeout,
        };
        let resp = match tokio::time::timeout(opts.request_timeout, send).await {
            Err(_) => Err(timed_out),
            Ok(result) => {
                result.map_err(|e| http::transport(route::WATCH, e, opts.request_timeout))
            }
        }?;
        let status = resp.status().as_u16();
        stats.response(route::WATCH, status);
        if resp.status().is_success() {
            return Ok(resp);
        }
        let retry_after = match status {
            429 | 503 => resp
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| crate::retry::parse_retry_after(v, std::time::SystemTime::now())),
            _ => None,
        };
        let body = tokio::time::timeout(
            opts.request_timeout,
            http::read_prefix(resp, 4 * MAX_SNIPPET_CHARS),
        )
        .await
        .unwrap_or_default();
        let raw = Raw {
            status,
            body,
            retry_after,
        };
        Err(self.status_error(route::WATCH, SCOPE_MACHINE, &raw))
    }
}

/// State of one connection, driven by `futures::stream::unfold`.
enum Conn {
    Start {
        client: FleetClient,
        url: Result<Url, FleetError>,
    },
    Open(Box<Open>),
    Done,
}

struct Open {
    client: FleetClient,
    resp: reqwest::Response,
    parser: SseParser,
    pending: VecDeque<ConnItem>,
}

impl Conn {
    async fn step(self) -> Option<(Result<ConnItem, FleetError>, Conn)> {
        match self {
            Conn::Done => None,
            Conn::Start { client, url } => {
                let opened = match url {
                    Ok(url) => client.open_watch(url).await,
                    Err(e) => Err(e),
                };
                match opened {
                    Ok(resp) => {
                        let parser = SseParser::new(client.inner.options.max_event_bytes);
                        let open = Open {
                            client,
                            resp,
                            parser,
                            pending: VecDeque::new(),
                        };
                        Some((Ok(ConnItem::Connected), Conn::Open(Box::new(open))))
                    }
                    Err(e) => {
                        client.inner.stats.error(route::WATCH, e.kind());
                        Some((Err(e), Conn::Done))
                    }
                }
            }
            Conn::Open(mut open) => match open.next().await {
                Some(Ok(item)) => Some((Ok(item), Conn::Open(open))),
                Some(Err(e)) => {
                    open.client.inner.stats.error(route::WATCH, e.kind());
                    Some((Err(e), Conn::Done))
                }
                None => None,
            },
        }
    }
}

impl Open {
    /// The next item of an open stream: a queued one, or read more bytes.
    /// `None` is a clean end of stream.
    async fn next(&mut self) -> Option<Result<ConnItem, FleetError>> {
        let idle = self.client.inner.options.watch_idle_timeout;
        let mut frames = Vec::new();
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(Ok(item));
            }
            // Any bytes, keepalive comments included, reset the idle timer.
            let chunk = match tokio::time::timeout(idle, self.resp.chunk()).await {
                Err(_) => {
                    return Some(Err(FleetError::Timeout {
                        route: route::WATCH,
                        what: "watch idle",
                        after: idle,
                    }));
                }
                Ok(Err(e)) => return Some(Err(http::transport(route::WATCH, e, idle))),
                Ok(Ok(None)) => return None,
                Ok(Ok(Some(chunk))) => chunk,
            };
            self.parser.feed(&chunk, &mut frames);
            for frame in frames.drain(..) {
                let item = self.decode(frame);
                self.pending.push_back(item);
            }
        }
    }

    fn decode(&self, frame: Frame) -> ConnItem {
        let stats = &self.client.inner.stats;
        let data = match frame {
            Frame::Data(data) => data,
            Frame::Oversized => {
                warn!(
                    route = route::WATCH,
                    limit = self.client.inner.options.max_event_bytes,
                    "skipping an oversized watch event"
                );
                stats.skipped(route::WATCH, 1);
                return ConnItem::Skipped { cursor: None };
            }
        };
        match decode_event(&data) {
            Ok(event) => ConnItem::Event(Box::new(event)),
            Err((reason, cursor)) => {
                let reason = self.client.scrub(&reason);
                warn!(route = route::WATCH, %reason, "skipping a watch event that does not parse");
                stats.skipped(route::WATCH, 1);
                ConnItem::Skipped { cursor }
            }
        }
    }
}

/// Parses one event's data: `{type, object, cursor}`. On failure returns the
/// reason and, when it could be read, the event's cursor (a skipped event
/// still moves the resume point past itself).
fn decode_event(data: &[u8]) -> Result<WatchEvent, (String, Option<String>)> {
    let value: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| (format!("not JSON: {e}"), None))?;
    let cursor = value.get("cursor").and_then(cursor_string);
    let event_type = match value.get("type").and_then(|t| t.as_str()) {
        Some(t) => EventType::from(t),
        None => return Err(("event has no `type`".into(), cursor)),
    };
    let object = value
        .get("object")
        .cloned()
        .ok_or_else(|| ("event has no `object`".to_owned(), cursor.clone()))?;
    let object = parse_entry(object).map_err(|reason| (reason, cursor.clone()))?;
    Ok(WatchEvent {
        event_type,
        object,
        cursor,
    })
}

/// State of [`FleetClient::watch_forever`].
struct Forever {
    client: FleetClient,
    outpost: String,
    /// Where the next connection resumes: the last processed event's cursor.
    cursor: Option<String>,
    conn: Option<ConnStream>,
    /// Wait before the next connection.
    sleep: Option<Duration>,
    /// Whether any connection (or attempt) ended yet.
    disconnected_once: bool,
    /// Connections opened after the first disconnect.
    reconnects: u64,
    /// Unhealthy connections in a row; drives the backoff.
    failures: u32,
    opened_at: Option<Instant>,
    /// The current connection delivered (or skipped) at least one event.
    progressed: bool,
}

impl Forever {
    async fn next_item(&mut self) -> WatchItem {
        loop {
            let conn = match &mut self.conn {
                Some(conn) => conn,
                None => {
                    if let Some(delay) = self.sleep.take() {
                        tokio::time::sleep(delay).await;
                    }
                    self.opened_at = None;
                    self.progressed = false;
                    self.conn.insert(
                        self.client
                            .connection(&self.outpost, self.cursor.as_deref()),
                    )
                }
            };
            match conn.next().await {
                Some(Ok(ConnItem::Connected)) => {
                    self.opened_at = Some(Instant::now());
                    if self.disconnected_once {
                        self.reconnects += 1;
                        return WatchItem::Reconnected {
                            reconnects: self.reconnects,
                            cursor: self.cursor.clone(),
                        };
                    }
                }
                Some(Ok(ConnItem::Event(event))) => {
                    self.progressed = true;
                    if let Some(cursor) = &event.cursor {
                        self.cursor = Some(cursor.clone());
                    }
                    return WatchItem::Event(*event);
                }
                Some(Ok(ConnItem::Skipped { cursor })) => {
                    self.progressed = true;
                    if cursor.is_some() {
                        self.cursor = cursor;
                    }
                }
                Some(Err(error)) => return self.disconnected(Some(error)),
                None => return self.disconnected(None),
            }
        }
    }

    fn disconnected(&mut self, error: Option<FleetError>) -> WatchItem {
        self.conn = None;
        self.disconnected_once = true;
        if matches!(error, Some(FleetError::CursorExpired { .. })) {
            // Retrying the same cursor would be refused forever.
            self.cursor = None;
        }
        let healthy = self.progressed
            || self
                .opened_at
                .is_some_and(|t| t.elapsed() >= self.client.inner.options.watch_healthy_after);
        if healthy {
            self.failures = 0;
        }
        // A server that said when to come back is not asked sooner.
        let retry_in = self
            .client
            .inner
            .options
            .watch_backoff
            .delay(self.failures)
            .max(
                error
                    .as_ref()
                    .and_then(FleetError::retry_after)
                    .unwrap_or_default(),
            );
        self.failures = self.failures.saturating_add(1);
        self.sleep = Some(retry_in);
        match &error {
            Some(e) => {
                debug!(error = %e, retry_in_ms = retry_in.as_millis() as u64, "watch disconnected")
            }
            None => debug!(
                retry_in_ms = retry_in.as_millis() as u64,
                "watch stream ended"
            ),
        }
        WatchItem::Disconnected { error, retry_in }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event_json(v: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn decodes_a_modified_event() {
        let e = decode_event(&event_json(json!({
            "type": "MODIFIED",
            "object": {"metadata": {"session_id": "devin-1", "outpost_id": "o"}},
            "cursor": "c7",
        })))
        .unwrap();
        assert_eq!(e.event_type, EventType::Modified);
        assert_eq!(e.object.session_id(), "devin-1");
        assert_eq!(e.cursor.as_deref(), Some("c7"));
    }

    #[test]
    fn bad_events_keep_their_cursor() {
        let (_, cursor) = decode_event(&event_json(json!({
            "type": "MODIFIED",
            "object": {"metadata": {"session_id": ""}},
            "cursor": 9,
        })))
        .unwrap_err();
        assert_eq!(cursor.as_deref(), Some("9"));
        let (_, cursor) = decode_event(b"{not json").unwrap_err();
        assert_eq!(cursor, None);
        assert!(decode_event(&event_json(json!({"object": {}, "cursor": "1"}))).is_err());
    }

    #[test]
    fn unknown_event_types_are_kept() {
        let e = decode_event(&event_json(json!({
            "type": "BOOKMARK",
            "object": {"metadata": {"session_id": "devin-1"}},
        })))
        .unwrap();
        assert_eq!(e.event_type, EventType::Unknown("BOOKMARK".into()));
    }
}
