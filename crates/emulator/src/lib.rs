//! A local emulator of Devin's side of the Outposts protocol
//! (`docs/outposts-protocol.md`), for tests and demos.
//!
//! One listener serves the fleet API (`/opbeta/outposts`, with claim TTLs,
//! keyset paging and an SSE watch), the partner connection flow
//! (`/outposts/connect`, `/outposts/connection-token`), the static
//! `devin-remote` distribution, the websocket gateway that remotes dial, and
//! an admin API (`/_emulator/`) that enqueues scripted sessions and injects
//! faults. [`Emulator`] is the in-process handle to the same operations.
//!
//! Module map: `state` holds the data and its transitions (pure, no
//! clock), `brain` decides what a connected remote does next, and the HTTP
//! modules (`fleet_api`, `watch`, `connect`, `distribution`, `gateway`,
//! `admin`, `faults`) translate between the wire and the state.

mod admin;
mod brain;
pub mod cli;
mod connect;
mod connect_page;
mod distribution;
mod events;
mod faults;
mod fleet_api;
mod gateway;
mod model;
mod server;
mod state;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub use model::{NewSession, Script, SessionView, Step, Then, TranscriptEvent};
pub use state::{SCOPE_MACHINE, SCOPE_ORCHESTRATOR};

use server::Shared;
use state::Stop;

/// Every knob of the emulator. `Default` gives the protocol's real values
/// (5-minute claims and streams) on a random loopback port; tests shorten
/// them to milliseconds.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Lifetime of a claim.
    pub claim_ttl: Duration,
    /// Longest a watch stream stays open.
    pub max_stream: Duration,
    /// Interval of `: keepalive` comments on an idle watch.
    pub keepalive: Duration,
    /// How long a released suspended/terminated row lingers as `pending`
    /// before it is removed with a DELETED event.
    pub linger: Duration,
    /// Lag between the remote's exit (sleep/end) and `session_status`
    /// changing.
    pub status_lag: Duration,
    /// Lifetime of a connect token.
    pub connect_token_ttl: Duration,
    /// The partner integration's callback allowlist: the connect page
    /// relays codes only to these exact URLs (Devin's partners page,
    /// "Callback allowlist"). Holds Garrison's default callback
    /// ([`fleet::pkce::DEFAULT_CALLBACK_URL`]) by default, so `garrison
    /// connect` works against the emulator out of the box.
    pub connect_callbacks: Vec<String>,
    /// Spelling of `claim_deadline` (all three are seen in the wild).
    pub deadline_format: fleet::TimestampFormat,
    /// The simulator binary served by the static distribution; `None` tries
    /// [`locate_remote_sim`].
    pub remote_binary: Option<PathBuf>,
    pub faults: Faults,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            claim_ttl: Duration::from_secs(300),
            max_stream: Duration::from_secs(300),
            keepalive: Duration::from_secs(15),
            linger: Duration::from_secs(30),
            status_lag: Duration::from_secs(2),
            connect_token_ttl: Duration::from_secs(24 * 3600),
            connect_callbacks: vec![fleet::pkce::DEFAULT_CALLBACK_URL.to_owned()],
            deadline_format: fleet::TimestampFormat::Seconds,
            remote_binary: None,
            faults: Faults::default(),
        }
    }
}

/// Misbehaviour seen in the wild, injected on demand.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Fraction of fleet API requests (under `/opbeta`) answered 500 or 503
    /// (alternately) before any state change.
    pub error_rate: f64,
    /// Added to every fleet API request.
    pub latency_ms: u64,
    /// Close each watch stream after this many seconds.
    pub cut_watch_every_secs: Option<u64>,
    /// Watch streams stay open and send keepalives but no events.
    pub withhold_events: bool,
    /// Fraction of reads (list/get/watch object) of a running session that
    /// show `session_status: suspended`.
    pub transient_suspended_rate: f64,
    /// Fraction of watch events sent twice in a row (delivery is
    /// at-least-once; clients must upsert).
    pub duplicate_event_rate: f64,
    /// Render a linux `spec.platform` as null ("the default") on outposts
    /// and queue entries, as the service does for outposts created without
    /// one.
    pub null_platform: bool,
    /// Fraction of claim answers (claims and renewals) sent without
    /// `status.claim_deadline`; the claim itself still has one.
    pub claim_deadline_missing_rate: f64,
    /// `claim_deadline` and `updated_at` as whole Unix seconds (truncated),
    /// as the reference server sends them, instead of fractional ones.
    pub whole_second_timestamps: bool,
}

/// A running emulator. Dropping it stops serving new work; [`shutdown`]
/// also waits for the server to wind down.
///
/// [`shutdown`]: Emulator::shutdown
pub struct Emulator {
    shared: Arc<Shared>,
    server: Option<tokio::task::JoinHandle<()>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Emulator {
    /// Binds the listener and serves in background tasks.
    pub async fn start(config: EmulatorConfig) -> anyhow::Result<Emulator> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        let addr = listener.local_addr()?;
        // Reading and hashing the binary is blocking work.
        let for_load = config.clone();
        let dist = tokio::task::spawn_blocking(move || server::load_distribution(&for_load))
            .await
            .context("loading the remote binary")?;
        let shared = Arc::new(Shared::new(config, addr, dist));
        let app = server::router(shared.clone());
        let mut stop = shared.shutdown.subscribe();
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(err) = serve.await {
                tracing::error!(%err, "emulator server failed");
            }
        });
        let ticker = tokio::spawn(server::tick_loop(shared.clone()));
        tracing::info!(base_url = %shared.base_url, "emulator listening");
        Ok(Emulator {
            shared,
            server: Some(server),
            ticker: Some(ticker),
        })
    }

    /// The API base, `http://127.0.0.1:PORT`; clients append
    /// `/opbeta/outposts`.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The account token minted at start, with both scopes.
    pub fn account_token(&self) -> String {
        self.shared.account_token.clone()
    }

    /// `{base}/static/devin-rs/remote/`.
    pub fn static_base_url(&self) -> String {
        format!("{}/static/devin-rs/remote/", self.shared.base_url)
    }

    /// `ws://127.0.0.1:PORT/gateway`, as handed out in claims.
    pub fn gateway_url(&self) -> String {
        self.shared.gateway_url.clone()
    }

    /// Mints an account token with exactly these scopes.
    pub fn mint_token(&self, scopes: &[&str]) -> String {
        self.shared.with_state(|s, _| s.mint_account_token(scopes))
    }

    /// Revokes an account token (the start-up one included): every later
    /// request with it is answered 401. Whether it existed.
    pub fn revoke_token(&self, token: &str) -> bool {
        self.shared.with_state(|s, _| s.revoke_account_token(token))
    }

    /// Adds a URL to the connect flow's callback allowlist.
    pub fn allow_callback(&self, url: &str) {
        self.shared.with_state(|s, _| s.allow_callback(url));
    }

    /// The ids of the service users redeemed codes created.
    pub fn service_users(&self) -> Vec<String> {
        self.shared
            .with_state(|s, _| s.service_users.keys().cloned().collect())
    }

    /// Creates an outpost and returns its id.
    pub fn create_outpost(&self, name: &str, platform: fleet::Platform) -> String {
        self.shared
            .with_state(|s, now| s.create_outpost(name, platform, None, now))
    }

    /// Enqueues a scripted session and returns its id.
    pub fn create_session(&self, req: NewSession) -> anyhow::Result<String> {
        Ok(self
            .shared
            .with_state(|s, now| s.create_session(req, now))?)
    }

    /// Puts the session to sleep: a connected remote is told `sleep`; the
    /// status becomes `suspended` after the lag.
    pub fn suspend(&self, session_id: &str) -> anyhow::Result<()> {
        self.shared.stop(session_id, Stop::Sleep)?;
        Ok(())
    }

    /// Queues a suspended session again (`spec.kind = resume`) with a new
    /// script.
    pub fn resume(&self, session_id: &str, script: Script) -> anyhow::Result<()> {
        self.shared
            .with_state(|s, now| s.resume(session_id, script, now))?;
        self.shared.kick();
        Ok(())
    }

    /// Ends the session: a connected remote is told `end`; the status
    /// becomes `terminated` after the lag.
    pub fn terminate(&self, session_id: &str) -> anyhow::Result<()> {
        self.shared.stop(session_id, Stop::End)?;
        Ok(())
    }

    /// The session's state and transcript.
    pub fn session(&self, session_id: &str) -> Option<SessionView> {
        self.shared.with_state(|s, _| s.view(session_id))
    }

    /// Every session, by id.
    pub fn sessions(&self) -> Vec<SessionView> {
        self.shared
            .with_state(|s, _| s.sessions.keys().filter_map(|id| s.view(id)).collect())
    }

    pub fn set_faults(&self, faults: Faults) {
        *server::lock(&self.shared.faults) = faults;
    }

    pub fn faults(&self) -> Faults {
        server::lock(&self.shared.faults).clone()
    }

    /// Requests served, by method and route template, e.g.
    /// `POST /opbeta/outposts/devins/{id}/claim`.
    /// Sets the lifetime of claims granted from now on (also `PUT
    /// /_emulator/claim_ttl`).
    pub fn set_claim_ttl(&self, ttl: Duration) {
        self.shared
            .with_state(|s, _| s.timing.claim_ttl_ms = ttl.as_millis() as i64);
    }

    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        server::lock(&self.shared.counts).clone()
    }

    /// The SHA `latest_linux_x64` (and `latest_linux_arm64`) points at; empty when no binary is served.
    pub fn remote_sha(&self) -> String {
        server::lock(&self.shared.dist).latest().unwrap_or_default()
    }

    /// Registers a SHA whose binary does not match its `.sha256`.
    pub fn add_corrupt_remote(&self) -> String {
        server::lock(&self.shared.dist).add_corrupt()
    }

    /// Drops the session's queue row with a DELETED event.
    pub fn remove_entry(&self, session_id: &str) {
        self.shared
            .with_state(|s, now| s.remove_entry(session_id, now));
        self.shared.kick();
    }

    /// Expires every list and watch cursor handed out so far, as the
    /// service does once it forgets old deletes: open watches end, and
    /// reading from an old cursor is answered 410 (list again).
    pub fn expire_cursors(&self) {
        self.shared.with_state(|s, _| s.expire_cursors());
    }

    /// Stops serving: open watches and gateway connections end, and the
    /// server task is awaited (bounded).
    pub async fn shutdown(mut self) {
        let _ = self.shared.shutdown.send(true);
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
        }
        if let Some(mut server) = self.server.take() {
            let finished = tokio::time::timeout(Duration::from_secs(5), &mut server).await;
            if finished.is_err() {
                server.abort();
            }
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.shared.shutdown.send(true);
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
        }
    }
}

/// Finds the `devin-remote-sim` binary: `$GARRISON_REMOTE_SIM`, then next to
/// the current executable, then its parent directory (tests run from
/// `target/debug/deps`), then the static release build
/// `target/x86_64-unknown-linux-gnu/release/` relative to those.
pub fn locate_remote_sim() -> Option<PathBuf> {
    const NAME: &str = "devin-remote-sim";
    if let Some(p) = std::env::var_os("GARRISON_REMOTE_SIM") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Some(p);
        }
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(parent) = dir.parent() {
        dirs.push(parent.to_path_buf());
    }
    let mut candidates: Vec<PathBuf> = dirs.iter().map(|d| d.join(NAME)).collect();
    for d in &dirs {
        // From target/debug or target/debug/deps, reach target/.
        for up in d.ancestors().skip(1).take(2) {
            candidates.push(
                up.join("x86_64-unknown-linux-gnu")
                    .join("release")
                    .join(NAME),
            );
        }
    }
    candidates.into_iter().find(|p| p.is_file())
}
