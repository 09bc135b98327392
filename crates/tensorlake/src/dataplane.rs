//! One sandbox's data-plane API, reached through Tensorlake's sandbox proxy
//! with the sandbox named in `X-Tensorlake-Sandbox-Id`
//! (`SandboxProxyClient` in `crates/cloud-sdk/src/sandboxes/mod.rs` of
//! <https://github.com/tensorlakeai/tensorlake>).

use std::sync::Arc;

use futures::{Stream, StreamExt};
use reqwest::Method;
use serde::de::DeserializeOwned;

use crate::client::{Http, read_bounded};
use crate::error::{Error, Result};
use crate::models::{
    CreatePty, OutputEvent, OutputResponse, ProcessInfo, ProcessList, PtySession, SignalRequest,
    StartProcess,
};
use crate::pty::PtyConnection;
use crate::retry::Idempotency;
use crate::sse::SseParser;

/// Header naming the sandbox a proxied request is for.
pub const SANDBOX_ID_HEADER: &str = "X-Tensorlake-Sandbox-Id";
/// Largest output answer read: a process's whole output comes at once.
const MAX_OUTPUT_BYTES: usize = 64 << 20;
/// Largest file read back.
const MAX_FILE_BYTES: usize = 256 << 20;

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessKey {
    Pid(i64),
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
        let chunks = response.bytes_stream();
        let stream = futures::stream::unfold(
            (
                chunks,
                SseParser::default(),
                std::collections::VecDeque::new(),
            ),
            |(mut chunks, mut parser, mut pending)| async move {
                loop {
                    if let Some(event) = pending.pop_front() {
                        return Some((event, (chunks, parser, pending)));
                    }
                    match chunks.next().await? {
                        Ok(bytes) => {
                            for data in parser.feed(&bytes) {
                                // Heartbeats and other events are skipped.
                                if let Ok(event) = serde_json::from_slice::<OutputEvent>(&data) {
                                    pending.push_back(Ok(event));
                                }
                            }
                        }
                        Err(e) => {
                            pending.push_back(Err(Error::transport(e)));
                        }
                    }
                }
            },
        );
        Ok(stream)
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
