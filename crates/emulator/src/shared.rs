//! What every request handler shares: the state under its mutex, the
//! faults in force, request counts, the distribution, and the channels that
//! carry change notifications and shutdown.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State as AxState;
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::{broadcast, watch};

use crate::config::{EmulatorConfig, Faults};
use crate::distribution::Distribution;
use crate::http::{ApiError, bearer};
use crate::lock::lock;
use crate::state::{AuthError, SCOPE_MACHINE, SCOPE_ORCHESTRATOR, State, StateError, Stop, Timing};
use common::now_ms;

pub(crate) type SharedState = AxState<Arc<Shared>>;

/// Everything the request handlers share.
pub(crate) struct Shared {
    pub config: EmulatorConfig,
    pub base_url: String,
    pub gateway_url: String,
    pub account_token: String,
    pub state: Mutex<State>,
    pub faults: Mutex<Faults>,
    pub counts: Mutex<BTreeMap<String, u64>>,
    pub dist: Mutex<Distribution>,
    /// The event log head after each change; watchers re-read the log on
    /// any message (or lag), so nothing is lost to a full channel.
    pub events: broadcast::Sender<u64>,
    /// Bumped when a connected brain may have something new to do.
    pub kick: watch::Sender<u64>,
    pub shutdown: watch::Sender<bool>,
    pub fault_counter: AtomicU64,
    pub next_conn: AtomicU64,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl Shared {
    pub(crate) fn new(config: EmulatorConfig, addr: SocketAddr, dist: Distribution) -> Self {
        let host = if addr.ip().is_unspecified() {
            SocketAddr::from(([127, 0, 0, 1], addr.port()))
        } else {
            addr
        };
        let base_url = format!("http://{host}");
        let gateway_url = format!("ws://{host}/gateway");
        let mut state = State::new(Timing {
            claim_ttl_ms: millis(config.claim_ttl),
            linger_ms: millis(config.linger),
            status_lag_ms: millis(config.status_lag),
            connect_token_ttl_ms: millis(config.connect_token_ttl),
            ..Timing::default()
        });
        for url in &config.connect_callbacks {
            state.allow_callback(url);
        }
        let account_token = state.mint_account_token(&[SCOPE_MACHINE, SCOPE_ORCHESTRATOR]);
        Self {
            faults: Mutex::new(config.faults.clone()),
            config,
            base_url,
            gateway_url,
            account_token,
            state: Mutex::new(state),
            counts: Mutex::default(),
            dist: Mutex::new(dist),
            events: broadcast::channel(1024).0,
            kick: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            fault_counter: AtomicU64::new(0),
            next_conn: AtomicU64::new(1),
        }
    }

    /// Runs one transition under the lock (never across an await) and
    /// wakes watchers and brains when it logged an event.
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut State, i64) -> R) -> R {
        let (result, before, after) = {
            let mut state = lock(&self.state);
            let before = state.log.head();
            let result = f(&mut state, now_ms());
            (result, before, state.log.head())
        };
        if after != before {
            let _ = self.events.send(after);
            self.kick();
        }
        result
    }

    pub(crate) fn kick(&self) {
        self.kick.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub(crate) fn faults(&self) -> Faults {
        lock(&self.faults).clone()
    }

    pub(crate) fn stop(&self, session_id: &str, stop: Stop) -> Result<(), StateError> {
        self.with_state(|s, now| s.request_stop(session_id, stop, now))?;
        self.kick();
        Ok(())
    }

    /// Checks `Authorization: Bearer` for one of `scopes`.
    pub(crate) fn authorize(&self, headers: &HeaderMap, scopes: &[&str]) -> Result<(), ApiError> {
        let token = bearer(headers).ok_or_else(ApiError::unauthorized)?;
        let checked = lock(&self.state).check_account_token(token, scopes);
        checked.map_err(|e| match e {
            AuthError::Unauthorized => ApiError::unauthorized(),
            AuthError::Forbidden => ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("token lacks scope {}", scopes.join(" or ")),
            ),
        })
    }
}

/// Resolves once the emulator is shutting down. (Awaiting `wait_for`
/// directly in a `select!` would keep a non-`Send` guard in the future.)
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
