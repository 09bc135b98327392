//! One sandbox's data-plane API, reached through Tensorlake's sandbox proxy
//! with the sandbox named in `X-Tensorlake-Sandbox-Id`
//! (`SandboxProxyClient` in `crates/cloud-sdk/src/sandboxes/mod.rs` of
//! <https://github.com/tensorlakeai/tensorlake>).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use reqwest::Method;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::http::{Http, read_bounded};
use crate::models::{
    CreatePty, OutputEvent, OutputResponse, ProcessInfo, ProcessList, PtySession, SignalRequest,
    StartProcess,
};
use crate::pty::PtyConnection;
use crate::retry::Idempotency;
use crate::sse::SseParser;

pub(crate) use crate::urls::SANDBOX_ID_HEADER;

/// Largest whole-output answer read ([`SandboxClient::output`], for
/// showing a short process's output; Garrison's sessions read theirs by
/// offset from the follow stream).
const MAX_OUTPUT_BYTES: usize = 64 << 20;
/// Largest file read back.
const MAX_FILE_BYTES: usize = 256 << 20;

/// How a process run with [`SandboxClient::run_process`] went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOutcome {
    /// The process id, once the start event came.
    pub pid: Option<i64>,
    /// The stream ended with an exit event (else it was cut).
    pub ended: bool,
    /// The exit code, if it exited.
    pub exit_code: Option<i64>,
    /// The signal that ended it, if one did.
    pub signal: Option<i64>,
    /// The output's last bytes (lines joined by `\n`).
    pub output: String,
}

impl RunOutcome {
    fn keep_line(&mut self, line: &str, keep: usize) {
        if !self.output.is_empty() {
            self.output.push('\n');
        }
        self.output.push_str(line);
        if self.output.len() > keep {
            let mut cut = self.output.len() - keep;
            while !self.output.is_char_boundary(cut) {
                cut += 1;
            }
            self.output.drain(..cut);
        }
    }
}

/// One event of the run stream, told apart by its fields as the SDK's
/// untagged `RunProcessEvent`: `{pid, started_at}`, `{line, ...}`, then
/// `{exit_code, signal}`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RunEvent<'a> {
    /// The process started.
    Started {
        /// Its process id.
        pid: i64,
    },
    /// One line of output.
    Output(&'a str),
    /// The process ended.
    Exited {
        /// Its exit code, if it exited.
        exit_code: Option<i64>,
        /// The signal that ended it, if one did.
        signal: Option<i64>,
    },
    /// Anything else: ignored.
    Other,
}

impl<'a> RunEvent<'a> {
    /// Tells one decoded event apart by its fields.
    pub(crate) fn of(event: &'a serde_json::Value) -> Self {
        if let Some(line) = event.get("line").and_then(|l| l.as_str()) {
            return Self::Output(line);
        }
        if let Some(pid) = event.get("pid").and_then(|p| p.as_i64())
            && event.get("started_at").is_some()
        {
            return Self::Started { pid };
        }
        let exit_code = event.get("exit_code").and_then(|c| c.as_i64());
        let signal = event.get("signal").and_then(|c| c.as_i64());
        if exit_code.is_some() || signal.is_some() {
            return Self::Exited { exit_code, signal };
        }
        Self::Other
    }
}

/// The `data` payloads of a server-sent-events answer.
fn sse_payloads(
    response: reqwest::Response,
) -> futures::stream::BoxStream<'static, Result<Vec<u8>>> {
    let chunks = response.bytes_stream();
    futures::stream::unfold(
        (
            chunks,
            SseParser::default(),
            std::collections::VecDeque::new(),
        ),
        |(mut chunks, mut parser, mut pending)| async move {
            loop {
                if let Some(payload) = pending.pop_front() {
                    return Some((payload, (chunks, parser, pending)));
                }
                match chunks.next().await? {
                    Ok(bytes) => pending.extend(parser.feed(&bytes).into_iter().map(Ok)),
                    Err(e) => pending.push_back(Err(Error::transport(e))),
                }
            }
        },
    )
    .boxed()
}

/// The data-plane client of one sandbox.
#[derive(Clone)]
pub struct SandboxClient {
    http: Arc<Http>,
    base: url::Url,
    sandbox_id: String,
}

impl std::fmt::Debug for SandboxClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxClient")
            .field("base", &self.base.as_str())
            .field("sandbox_id", &self.sandbox_id)
            .finish()
    }
}

/// A process by pid or by managed name (a name is never all digits).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ProcessKey {
    /// The process id.
    Pid(i64),
    /// The name it was started under.
    Name(String),
}

impl ProcessKey {
    fn segment(&self) -> String {
        match self {
            Self::Pid(pid) => pid.to_string(),
            Self::Name(name) => name.clone(),
        }
    }
}

impl SandboxClient {
    pub(crate) fn new(http: Arc<Http>, base: url::Url, sandbox_id: &str) -> Result<Self> {
        if sandbox_id.is_empty()
            || !sandbox_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(Error::Decode(format!("sandbox id {sandbox_id:?}")));
        }
        Ok(Self {
            http,
            base,
            sandbox_id: sandbox_id.to_owned(),
        })
    }

    /// The sandbox this client reaches.
    pub fn sandbox_id(&self) -> &str {
        &self.sandbox_id
    }

    pub(crate) fn url(&self, segments: &[&str]) -> url::Url {
        let mut url = self.base.clone();
        url.set_query(None);
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }

    fn request(
        &self,
        c: &reqwest::Client,
        method: Method,
        url: url::Url,
    ) -> reqwest::RequestBuilder {
        c.request(method, url)
            .header(SANDBOX_ID_HEADER, &self.sandbox_id)
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&(impl serde::Serialize + Sync)>,
        idem: Idempotency,
    ) -> Result<T> {
        let url = self.url(segments);
        self.http
            .json(idem, |c| {
                let r = self.request(c, method.clone(), url.clone());
                match body {
                    Some(b) => r.json(b),
                    None => r,
                }
            })
            .await
    }

    /// Starts a process.
    pub async fn start_process(&self, request: &StartProcess) -> Result<ProcessInfo> {
        if let Some(name) = &request.name
            && (name.is_empty() || name.contains('/') || name.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(Error::Invalid(format!(
                "managed process name {name:?}: not empty, no '/', not all digits"
            )));
        }
        self.json(
            Method::POST,
            &["processes"],
            Some(request),
            Idempotency::NotIdempotent,
        )
        .await
    }

    /// Every process the daemon knows, running or exited.
    pub async fn list_processes(&self) -> Result<Vec<ProcessInfo>> {
        let list: ProcessList = self
            .json(
                Method::GET,
                &["processes"],
                None::<&()>,
                Idempotency::Idempotent,
            )
            .await?;
        Ok(list.processes)
    }

    /// One process's record.
    pub async fn get_process(&self, process: &ProcessKey) -> Result<ProcessInfo> {
        self.json(
            Method::GET,
            &["processes", &process.segment()],
            None::<&()>,
            Idempotency::Idempotent,
        )
        .await
    }

    /// Sends a signal (its number) to a process.
    pub async fn signal_process(&self, process: &ProcessKey, signal: i32) -> Result<()> {
        let url = self.url(&["processes", &process.segment(), "signal"]);
        let body = SignalRequest { signal };
        self.http
            .send(Idempotency::Idempotent, |c| {
                self.request(c, Method::POST, url.clone()).json(&body)
            })
            .await?;
        Ok(())
    }

    /// The process's stdout and stderr lines so far, interleaved.
    pub async fn output(&self, process: &ProcessKey) -> Result<OutputResponse> {
        let url = self.url(&["processes", &process.segment(), "output"]);
        let response = self
            .http
            .send(Idempotency::Idempotent, |c| {
                self.request(c, Method::GET, url.clone())
            })
            .await?;
        let bytes = read_bounded(response, MAX_OUTPUT_BYTES, "process output").await?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Decode(e.to_string()))
    }

    /// Follows the process's output: every line so far, then new lines as
    /// they come, ending when the process has exited.
    pub async fn follow_output(
        &self,
        process: &ProcessKey,
    ) -> Result<impl Stream<Item = Result<OutputEvent>> + Send + 'static> {
        let url = self.url(&["processes", &process.segment(), "output", "follow"]);
        let response = self
            .http
            .send_with(Idempotency::Idempotent, None, &[], |c| {
                self.request(c, Method::GET, url.clone())
                    .header(reqwest::header::ACCEPT, "text/event-stream")
            })
            .await?;
        // Heartbeats and other events are skipped.
        Ok(sse_payloads(response)
            .filter_map(|payload| async move {
                match payload {
                    Ok(data) => serde_json::from_slice::<OutputEvent>(&data).ok().map(Ok),
                    Err(e) => Some(Err(e)),
                }
            })
            .boxed())
    }

    /// Runs a process to completion over one streaming request
    /// (`POST /api/v1/processes/run`, as the SDK's `run`): its pid, how it
    /// ended, and the last `keep` bytes of its output (lines joined by
    /// `\n`).
    pub async fn run_process(&self, request: &StartProcess, keep: usize) -> Result<RunOutcome> {
        let url = self.url(&["processes", "run"]);
        let response = self
            .http
            .send_with(Idempotency::NotIdempotent, None, &[], |c| {
                self.request(c, Method::POST, url.clone())
                    .header(reqwest::header::ACCEPT, "text/event-stream")
                    .json(request)
            })
            .await?;
        let mut events = sse_payloads(response);
        let mut outcome = RunOutcome::default();
        while let Some(payload) = events.next().await {
            let Ok(event) = serde_json::from_slice::<serde_json::Value>(&payload?) else {
                continue;
            };
            match RunEvent::of(&event) {
                RunEvent::Started { pid } => outcome.pid = Some(pid),
                RunEvent::Output(line) => outcome.keep_line(line, keep),
                RunEvent::Exited { exit_code, signal } => {
                    outcome.exit_code = exit_code;
                    outcome.signal = signal;
                    outcome.ended = true;
                }
                RunEvent::Other => {}
            }
        }
        Ok(outcome)
    }

    /// Writes a file (parents created by the daemon), replacing it.
    pub async fn put_file(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let mut url = self.url(&["files"]);
        url.query_pairs_mut().append_pair("path", path);
        let body = bytes::Bytes::copy_from_slice(bytes);
        self.http
            .send(Idempotency::Idempotent, |c| {
                self.request(c, Method::PUT, url.clone()).body(body.clone())
            })
            .await?;
        Ok(())
    }

    /// Reads a file of the sandbox, at most 256 MiB.
    pub async fn get_file(&self, path: &str) -> Result<Vec<u8>> {
        let mut url = self.url(&["files"]);
        url.query_pairs_mut().append_pair("path", path);
        let response = self
            .http
            .send(Idempotency::Idempotent, |c| {
                self.request(c, Method::GET, url.clone())
            })
            .await?;
        read_bounded(response, MAX_FILE_BYTES, "file").await
    }

    /// Creates a PTY session running `request.command`.
    pub async fn create_pty(&self, request: &CreatePty) -> Result<PtySession> {
        let session: PtySession = self
            .json(
                Method::POST,
                &["pty"],
                Some(request),
                Idempotency::NotIdempotent,
            )
            .await?;
        check_plain(&session.session_id, "PTY session id")?;
        Ok(session)
    }

    /// Ends a PTY session.
    pub async fn delete_pty(&self, session_id: &str) -> Result<()> {
        let url = self.url(&["pty", session_id]);
        self.http
            .send(Idempotency::Idempotent, |c| {
                self.request(c, Method::DELETE, url.clone())
            })
            .await?;
        Ok(())
    }

    /// Attaches to a PTY session over its websocket.
    pub async fn connect_pty(&self, session: &PtySession) -> Result<PtyConnection> {
        // The token travels in the `X-PTY-Token` header, never in the URL,
        // where proxies' access logs would keep it.
        let mut url = self.url(&["pty", &session.session_id, "ws"]);
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme)
            .map_err(|()| Error::Invalid("websocket URL".into()))?;
        PtyConnection::connect(
            url,
            self.http.api_key.expose(),
            &self.sandbox_id,
            &session.token,
        )
        .await
    }
}

fn check_plain(id: &str, what: &str) -> Result<()> {
    if !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        Ok(())
    } else {
        Err(Error::Decode(format!("{what} {id:?}")))
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_events_are_told_apart_by_their_fields() {
        let started = json!({"pid": 7, "started_at": 1.5});
        assert_eq!(RunEvent::of(&started), RunEvent::Started { pid: 7 });
        let line = json!({"line": "hi", "stream": "stdout", "timestamp": 1});
        assert_eq!(RunEvent::of(&line), RunEvent::Output("hi"));
        let exited = json!({"exit_code": 3, "signal": null, "reason": "exited"});
        assert_eq!(
            RunEvent::of(&exited),
            RunEvent::Exited {
                exit_code: Some(3),
                signal: None
            }
        );
        assert_eq!(RunEvent::of(&json!({"exit_code": null})), RunEvent::Other);
    }

    #[test]
    fn a_run_keeps_only_the_last_bytes_of_its_output() {
        let mut outcome = RunOutcome::default();
        for line in ["one", "two", "three"] {
            outcome.keep_line(line, 8);
        }
        assert_eq!(outcome.output, "wo\nthree");
        let mut wide = RunOutcome::default();
        wide.keep_line("ééé", 3);
        assert_eq!(wide.output, "é");
    }
}
