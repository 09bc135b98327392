#![warn(missing_docs)]
//! A local stand-in for the part of Modal's gRPC API (service
//! `modal.client.ModalClient`) that Garrison uses, for tests.
//!
//! It follows Modal's published semantics where Garrison depends on them:
//! every call must carry `x-modal-token-id`/`x-modal-token-secret` (else
//! `UNAUTHENTICATED`) and `x-modal-client-version` (else
//! `FAILED_PRECONDITION`); a sandbox is scheduled, runs its entry point
//! until it ends, is terminated or times out, and is listed by app and
//! tags; named sandboxes are unique per app; `ContainerExec` runs a
//! command whose output is streamed in numbered batches, the last carrying
//! the exit code; filesystem snapshots are images that expire (after a
//! configurable time, `NOT_FOUND` from then on: Modal keeps them until
//! deleted, so expiry stands for a deletion behind Garrison's back); image
//! builds record their
//! Dockerfile commands and stream a build result.
//!
//! It also serves what Modal's client 1.6.4 uses by default: the V2 sandbox
//! calls (`SandboxCreateV2` answers with the task and the address and token
//! of its command router) and the task command router itself
//! (`modal.task_command_router.TaskCommandRouter`: processes with an
//! environment map, stdout and stderr read by byte offset, filesystem
//! snapshots with a TTL, memory snapshots, network changes), beside the API
//! on the same loopback port, in plaintext. A repeated `x-idempotency-key`
//! on `SandboxCreateV2` answers with the sandbox the first request made, and
//! faults can be injected before a call acts ([`MockModal::fail_next`]) or
//! after, losing its answer ([`MockModal::lose_next_answers`]).
//!
//! There is no container: a sandbox is a directory on the host
//! (`<root>/sandboxes/<id>`, the sandbox's starting directory) and its
//! processes run on the host with an empty environment except `PATH` and
//! the variables of the Secrets the sandbox was created with, so the
//! devin-remote simulator can run against the emulator. Network policies
//! are recorded, not enforced. Secrets are kept in memory only. A sandbox's
//! processes are found by their process groups and parentage, and, for one
//! that double-forks into a new session and is re-parented away, by the
//! `MODAL_MOCK_SANDBOX_ID` every exec's environment carries or by a working
//! directory inside the sandbox's: termination and memory snapshots reach
//! it as a real sandbox's would. A memory snapshot moves the stopped
//! processes and the directory into the snapshot (a host cannot copy a
//! process tree): the sandbox ends, and one restore resumes them.

mod exec;
mod ids;
mod router;
mod secrets;
mod service;
mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use modal::wire::modal_client_server::ModalClientServer;
use modal::wire::router::task_command_router_server::TaskCommandRouterServer;
use tokio::sync::oneshot;

pub use state::{ImageView, SandboxView};

/// How the mock behaves.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// The only `x-modal-token-id` accepted.
    pub token_id: String,
    /// The only `x-modal-token-secret` accepted.
    pub token_secret: String,
    /// Where sandbox directories and snapshots are kept.
    pub root: PathBuf,
    /// Snapshot images older than this are gone; `None` keeps them until
    /// deleted, as Modal does with filesystem snapshots. A TTL stands for
    /// a snapshot deleted behind Garrison's back (by someone else's
    /// clean-up, say).
    pub snapshot_ttl: Option<Duration>,
}

impl MockConfig {
    /// Default credentials (`ak-mock` / `as-mock`); snapshots are kept until
    /// deleted (Modal keeps filesystem snapshots indefinitely).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            token_id: "ak-mock".to_owned(),
            token_secret: "as-mock".to_owned(),
            root: root.into(),
            snapshot_ttl: None,
        }
    }
}

/// A running mock. Dropping it stops the server and every process it
/// started.
pub struct MockModal {
    addr: SocketAddr,
    state: Arc<state::State>,
    stop: Option<oneshot::Sender<()>>,
}

impl MockModal {
    /// Starts the server on a free loopback port.
    pub async fn start(config: MockConfig) -> anyhow::Result<Self> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config).await
    }

    /// Starts the server on `addr`, which must be a loopback address: the
    /// mock runs whatever a token holder asks for on this host, unsandboxed.
    pub async fn start_on(addr: SocketAddr, config: MockConfig) -> anyhow::Result<Self> {
        anyhow::ensure!(
            addr.ip().is_loopback(),
            "{addr}: the mock listens on loopback addresses only"
        );
        std::fs::create_dir_all(config.root.join("sandboxes"))
            .with_context(|| format!("creating {}", config.root.display()))?;
        std::fs::create_dir_all(config.root.join("images"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(state::State::new(config));
        let auth = service::Auth::new(&state);
        let _ = state.url.set(format!("http://{addr}"));
        let server =
            ModalClientServer::with_interceptor(service::Service::new(state.clone()), auth);
        let router = TaskCommandRouterServer::with_interceptor(
            router::Router::new(state.clone()),
            router::RouterAuth::new(state.clone()),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(server)
                .add_service(router)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            state,
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`, for `MODAL_SERVER_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The token id the mock accepts.
    pub fn token_id(&self) -> &str {
        &self.state.config.token_id
    }

    /// The token secret the mock accepts.
    pub fn token_secret(&self) -> &str {
        &self.state.config.token_secret
    }

    /// The id of a ready base image (the host, as far as the mock goes).
    pub fn base_image_id(&self) -> String {
        state::BASE_IMAGE_ID.to_owned()
    }

    /// Makes the next `times` calls of `rpc` (e.g. `"SandboxCreate"`) fail
    /// with `code` before they do anything.
    pub fn fail_next(&self, rpc: &str, code: tonic::Code, times: u32) {
        self.state.fail_next(rpc, code, times);
    }

    /// Makes the next `times` calls of `rpc` do their work and then fail
    /// with UNAVAILABLE, as when the connection drops before the answer
    /// arrives: a retry must not make a second sandbox.
    pub fn lose_next_answers(&self, rpc: &str, times: u32) {
        self.state.lose_next_answers(rpc, times);
    }

    /// The `x-retry-attempt` each call of `SandboxCreateV2` carried, in
    /// order (`None`: absent or not a number).
    pub fn create_retry_attempts(&self) -> Vec<Option<u32>> {
        self.state.retry_attempts("SandboxCreateV2")
    }

    /// How many calls of `rpc` reached the mock (failed ones included,
    /// unauthenticated ones not).
    pub fn calls(&self, rpc: &str) -> u32 {
        self.state.calls(rpc)
    }

    /// Moves the mock's clock on, so snapshots expire without waiting.
    pub fn advance_clock(&self, by: Duration) {
        self.state.advance_clock(by);
    }

    /// What a sandbox was created with, and whether it is still running.
    pub fn sandbox(&self, sandbox_id: &str) -> Option<SandboxView> {
        self.state.sandbox_view(sandbox_id)
    }

    /// Every sandbox ever created, oldest first.
    pub fn sandboxes(&self) -> Vec<SandboxView> {
        self.state.sandbox_views()
    }

    /// An image as built or snapshotted.
    pub fn image(&self, image_id: &str) -> Option<ImageView> {
        self.state.image_view(image_id)
    }

    /// The names of the named Secrets, sorted (never their values).
    pub fn secret_names(&self) -> Vec<String> {
        self.state.secrets.names()
    }

    /// `environment/name` of the named Secrets, sorted (the default
    /// environment is the empty name).
    pub fn secret_qualified_names(&self) -> Vec<String> {
        self.state.secrets.qualified_names()
    }

    /// Every image built with `ImageGetOrCreate` (not snapshots).
    pub fn built_images(&self) -> Vec<ImageView> {
        self.state.built_images()
    }
}

impl Drop for MockModal {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.state.terminate_all();
    }
}
