//! The `tensorlake` backend: one named Tensorlake sandbox per session.
//!
//! - The sandbox is named after the session's [`SandboxName`] (a hash of the
//!   session id: lowercase letters, digits, one hyphen), created with
//!   `auto_resume` off, sized by the outpost's resources, with
//!   `timeout_secs` idle seconds before Tensorlake suspends it, and with
//!   the egress rules of [`crate::policy::controls`] (the gateway
//!   allowed).
//! - Garrison keeps its directories under one root inside the sandbox
//!   ([`TensorlakeConfig::sandbox_root`]): `workspace/`, `state/`, `bin/`,
//!   `home/`, and `garrison-labels.json` (Tensorlake has no labels).
//! - Files go in through the files API; their mode is set by a short
//!   process (the files API has none), which also renames them into place
//!   so a replaced binary is never seen half-written.
//! - Processes are managed processes named after [`ProcessSpec::name`],
//!   never restarted by the daemon, with exactly the given environment.
//! - Every data-plane call first checks the sandbox: one Tensorlake
//!   suspended for idleness while its session runs is resumed (its
//!   `auto_resume` is off, so nothing else would wake it).
//! - [`Sandbox::suspend`] keeps memory and disk; [`Sandbox::resume`] reports
//!   [`SandboxError::Gone`] when the sandbox is no more, so the caller falls
//!   back to a snapshot and then to a fresh sandbox.
//!
//! The code is cut by concern: `lifecycle` (create, wait, wake, suspend,
//! resume, delete), `processes` (managed processes and Garrison's own
//! helper commands), `files`, `snapshots`, `labels` (and listing, which
//! needs them) and `network` (egress rules and the gateway). This file
//! holds the configuration, the handle layout and the helpers they share.
//!
//! [`SandboxName`]: sandbox::SandboxName

mod files;
mod labels;
mod lifecycle;
mod network;
mod output;
mod processes;
mod snapshots;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use sandbox::{
    Capabilities, Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Result, Sandbox,
    SandboxError, SandboxSpec, SnapshotRef, is_plain_id,
};

use crate::client::Client;
use crate::error::Error;
use crate::models::SandboxStatus;
use crate::retry::RetryPolicy;
use common::Secret;

pub(crate) use processes::process_status;

const KIND: &str = "tensorlake";
/// Every process Garrison starts in a sandbox also appends its output
/// here (under the sandbox root), so that it can be followed from inside
/// the sandbox: `garrison logs -f` runs `tail -F` on it over the PTY
/// websocket. The daemon keeps the output it captures as before.
pub const OUTPUT_LOG: &str = "output.log";
/// Placeholder for the sandbox id in [`TensorlakeConfig::sandbox_root`].
pub(crate) const ID_PLACEHOLDER: &str = "{id}";
/// Where Garrison keeps its directories in a real Tensorlake sandbox.
pub(crate) const DEFAULT_SANDBOX_ROOT: &str = "/garrison";
/// Bounds a wait for a state change; never an expectation of speed.
const TRANSITION_GUARD: Duration = Duration::from_secs(600);

/// How to reach Tensorlake and lay out its sandboxes.
#[derive(Clone, Debug)]
pub struct TensorlakeConfig {
    /// The API, [`crate::DEFAULT_API_URL`] unless testing.
    pub api_url: String,
    /// Where the lifecycle calls go when not derived from `api_url` (see
    /// `crate::urls`; `TENSORLAKE_SANDBOX_API_URL`).
    pub sandbox_api_url: Option<String>,
    /// The API key, sent as a bearer token.
    pub api_key: Secret,
    /// The image sandboxes boot from when a spec names none.
    pub default_image: Option<String>,
    /// Idle seconds before Tensorlake suspends a sandbox (`timeout_secs`).
    pub timeout_secs: u64,
    /// Directory inside the sandbox that holds Garrison's directories;
    /// `{id}` (`ID_PLACEHOLDER`) is replaced by the sandbox id (the mock runs every
    /// sandbox in its own host directory).
    pub sandbox_root: String,
    /// Holds a 0600 copy of each sandbox's labels, so `list` can name the
    /// session of a suspended sandbox without waking it.
    pub state_dir: PathBuf,
    /// How the client retries failed requests.
    pub retry: RetryPolicy,
}

/// The backend. Stateless apart from the label cache on disk: a new
/// instance with the same configuration picks up every sandbox.
pub struct TensorlakeBackend {
    client: Client,
    config: TensorlakeConfig,
    /// Open output-follow streams, for reading output by offset.
    readers: output::Readers,
}

impl TensorlakeBackend {
    /// A backend for `config`; refuses a relative sandbox root and makes the
    /// private state directory.
    pub fn new(config: TensorlakeConfig) -> anyhow::Result<Self> {
        let client = Client::with_retry(&config.api_url, config.api_key.clone(), config.retry)?
            .with_sandbox_api_url(config.sandbox_api_url.as_deref())?;
        if !config.sandbox_root.starts_with('/') {
            anyhow::bail!(
                "the Tensorlake sandbox root {:?} must be an absolute path",
                config.sandbox_root
            );
        }
        let labels = config.state_dir.join("labels");
        std::fs::create_dir_all(&labels)?;
        set_private(&config.state_dir)?;
        set_private(&labels)?;
        Ok(Self {
            client,
            config,
            readers: output::Readers::default(),
        })
    }

    /// The lifecycle client the backend uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The root of Garrison's directories in sandbox `id`.
    fn root(&self, id: &str) -> String {
        root_of(&self.config.sandbox_root, id)
    }

    fn handle_for(
        &self,
        id: &str,
        name: &str,
        labels: BTreeMap<String, String>,
        image: Option<String>,
    ) -> Handle {
        let root = self.root(id);
        Handle {
            backend: KIND.to_owned(),
            id: id.to_owned(),
            name: name.to_owned(),
            labels,
            workdir: format!("{root}/workspace"),
            state_dir: format!("{root}/state"),
            bin_dir: format!("{root}/bin"),
            home: format!("{root}/home"),
            image,
        }
    }
}

#[async_trait]
impl Sandbox for TensorlakeBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            os: sandbox::Os::Linux,
            // Tensorlake's microVMs are x86_64 (no setting chooses otherwise).
            arch: sandbox::Arch::X86_64,
            suspend_keeps_memory: true,
            enforces_network_policy: true,
            snapshots: true,
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Handle> {
        lifecycle::create(self, spec).await
    }

    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
        files::put_file(self, handle, path, bytes, mode).await
    }

    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> Result<ProcessRef> {
        processes::spawn(self, handle, process).await
    }

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        processes::status(self, handle, process).await
    }

    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()> {
        processes::kill(self, handle, process, grace).await
    }

    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        processes::read_output(self, handle, process, offset, max).await
    }

    async fn snapshot(&self, handle: &Handle) -> Result<SnapshotRef> {
        snapshots::snapshot(self, handle).await
    }

    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        snapshots::snapshot_exists(self, snapshot).await
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<()> {
        snapshots::delete_snapshot(self, snapshot).await
    }

    async fn destroy(&self, handle: &Handle) -> Result<()> {
        lifecycle::destroy(self, handle).await
    }

    async fn list(&self) -> Result<Vec<Handle>> {
        labels::list(self).await
    }

    async fn update_network_policy(
        &self,
        handle: &Handle,
        policy: &common::NetworkPolicy,
    ) -> Result<()> {
        network::update_network_policy(self, handle, policy).await
    }

    async fn suspend(&self, handle: &Handle) -> Result<()> {
        self.transition(handle, SandboxStatus::Suspended).await
    }

    async fn resume(&self, handle: &Handle) -> Result<()> {
        self.transition(handle, SandboxStatus::Running).await
    }
}

/// The root of Garrison's directories in sandbox `id`, from the
/// [`TensorlakeConfig::sandbox_root`] template.
pub(crate) fn root_of(sandbox_root: &str, id: &str) -> String {
    sandbox_root
        .replace(ID_PLACEHOLDER, id)
        .trim_end_matches('/')
        .to_owned()
}

/// Where the output of sandbox `id`'s processes is appended ([`OUTPUT_LOG`]).
pub fn output_log_of(sandbox_root: &str, id: &str) -> String {
    format!("{}/{OUTPUT_LOG}", root_of(sandbox_root, id))
}

fn plain(id: &str) -> bool {
    is_plain_id(id)
}

fn check_id(id: &str) -> Result<()> {
    if plain(id) {
        Ok(())
    } else {
        Err(SandboxError::Fatal(anyhow!("invalid Tensorlake id {id:?}")))
    }
}

fn map_err(e: Error) -> SandboxError {
    if e.is_not_found() {
        SandboxError::Gone(e.to_string())
    } else if e.is_transient() {
        SandboxError::Transient(e.into())
    } else {
        SandboxError::Fatal(e.into())
    }
}

fn set_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Polling with a growing pause: quick at first, gentle later.
struct Poll(Duration);

impl Poll {
    fn new() -> Self {
        Self(Duration::from_millis(20))
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_millis(500));
    }
}
