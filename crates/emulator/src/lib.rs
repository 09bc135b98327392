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
//! clock), `brain` decides what a connected remote does next, `shared` is
//! the state under its lock that every handler reaches, `http` the
//! boundary helpers, and the HTTP modules (`fleet_api`, `watch`, `render`,
//! `connect`, `static_files`, `gateway`, `admin`, `faults`) translate
//! between the wire and the state. `server` assembles their routes; none of
//! them imports it.

mod admin;
mod brain;
pub mod cli;
mod config;
mod connect;
mod connect_page;
mod distribution;
mod events;
mod faults;
mod fleet_api;
mod gateway;
mod http;
mod lock;
mod model;
mod render;
mod server;
mod shared;
mod state;
mod static_files;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

pub use config::{EmulatorConfig, Faults, locate_remote_sim};
pub use model::{NewSession, Script, SessionView, Step, Then, TranscriptEvent};
pub use state::{SCOPE_MACHINE, SCOPE_ORCHESTRATOR};

use lock::lock;
use shared::Shared;
use state::Stop;

/// A running emulator. Dropping it stops serving new work; [`shutdown`]
/// also waits for the server to wind down.
///
/// [`shutdown`]: Emulator::shutdown
pub struct Emulator {
    shared: Arc<Shared>,
    server: Option<tokio::task::JoinHandle<()>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
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
            // The peer's address reaches the gateway's transcript.
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
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

    /// Replaces the faults in force (also `PUT /_emulator/faults`).
    pub fn set_faults(&self, faults: Faults) {
        *lock(&self.shared.faults) = faults;
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        lock(&self.shared.faults).clone()
    }

    /// Sets the lifetime of claims granted from now on (also `PUT
    /// /_emulator/claim_ttl`).
    pub fn set_claim_ttl(&self, ttl: Duration) {
        self.shared
            .with_state(|s, _| s.timing.claim_ttl_ms = ttl.as_millis() as i64);
    }

    /// Requests served, by method and route template, e.g.
    /// `POST /opbeta/outposts/devins/{id}/claim`.
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.shared.counts).clone()
    }

    /// The SHA `latest_linux_x64` (and `latest_linux_arm64`) points at; empty when no binary is served.
    pub fn remote_sha(&self) -> String {
        lock(&self.shared.dist).latest().unwrap_or_default()
    }

    /// Registers a SHA whose binary does not match its `.sha256`.
    pub fn add_corrupt_remote(&self) -> String {
        lock(&self.shared.dist).add_corrupt()
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
