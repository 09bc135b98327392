//! Sandboxes: the one trait every backend implements, the shared
//! conformance suite, and the backends themselves.
//!
//! A backend knows nothing about Devin. The orchestrator asks it for an
//! isolated machine ([`Sandbox::create`]), puts files in, spawns a detached
//! process, watches it, snapshots the machine's filesystem and destroys it.
//! Everything a backend hands back ([`Handle`], [`ProcessRef`],
//! [`SnapshotRef`]) is plain serializable data, so the orchestrator can write
//! it to its state store and pick up the same sandbox after a restart.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use os::Os;

pub mod bounded_output;
pub mod conformance;
pub mod host;
pub mod local;
pub mod names;
mod os;
pub mod plugin;
pub mod policy;
pub mod shim;
pub mod snapshot_dir;
pub mod snapshot_store;

pub use names::SandboxName;

/// Label keys every backend stores with a sandbox, so `list` can map a
/// leftover sandbox back to its session.
pub const LABEL_SESSION_ID: &str = "garrison.session_id";
pub const LABEL_OUTPOST_ID: &str = "garrison.outpost_id";
/// The acceptor id of the Garrison that made the sandbox: on a cloud
/// account several Garrisons share, each cleans up only its own orphans.
pub const LABEL_ACCEPTOR_ID: &str = "garrison.acceptor_id";

/// Labels for a session's sandbox.
pub fn session_labels(session_id: &str, outpost_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_SESSION_ID.to_owned(), session_id.to_owned()),
        (LABEL_OUTPOST_ID.to_owned(), outpost_id.to_owned()),
    ])
}

/// Compute and disk given to one sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: f64,
    pub memory_mb: u64,
    pub disk_mb: u64,
}

impl Default for Resources {
    /// The seeds' defaults: 2 vCPU, 8 GiB memory, 10 GiB disk.
    fn default() -> Self {
        Self {
            cpus: 2.0,
            memory_mb: 8192,
            disk_mb: 10240,
        }
    }
}

/// What the sandbox's network may reach. Backends that cannot enforce a
/// policy must say so in their documentation; `gateway` is always allowed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkSpec {
    pub policy: common::NetworkPolicy,
    /// The gateway URL the remote must reach (host and port are allowed
    /// whatever the policy says).
    pub gateway_url: Option<String>,
}

/// Everything needed to create one sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub name: SandboxName,
    pub labels: BTreeMap<String, String>,
    /// Backend-specific image reference; `None` is the backend's default.
    pub image: Option<String>,
    /// Start from this snapshot's filesystem instead of a fresh one.
    pub restore_from: Option<SnapshotRef>,
    pub resources: Resources,
    pub network: NetworkSpec,
}

/// A created sandbox, as stored by the orchestrator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handle {
    pub backend: String,
    /// The backend's own id for the sandbox.
    pub id: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The directory, as seen by processes in the sandbox, that holds the
    /// session's repositories: the remote's working directory.
    pub workdir: String,
    /// A private per-session directory for `DEVIN_REMOTE_STATE_DIR`.
    pub state_dir: String,
    /// Where binaries put in by the orchestrator go.
    pub bin_dir: String,
    /// `HOME` for processes in the sandbox.
    pub home: String,
    /// The image the sandbox was started from, if the backend has images.
    pub image: Option<String>,
}

/// How to start a process inside a sandbox.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// The process's id within the sandbox, chosen by the caller before it
    /// spawns (letters, digits, `-`, `_`). Because the caller writes it down
    /// first, a crash between spawning and recording cannot leave an
    /// unknown process: after a restart, `status` of that name tells.
    /// Spawning a name that exists is an error.
    pub name: String,
    pub argv: Vec<String>,
    /// The complete environment: nothing else is inherited.
    pub env: BTreeMap<String, String>,
    pub cwd: String,
}

impl fmt::Debug for ProcessSpec {
    /// The environment carries the connect token, so only its keys print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessSpec")
            .field("name", &self.name)
            .field("argv", &self.argv)
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// A detached process, as stored by the orchestrator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRef {
    pub id: String,
}

/// What became of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "code")]
pub enum ProcessStatus {
    Running,
    /// Exited with this code (128 + N for death by signal N).
    Exited(i32),
    /// No longer running and its exit code cannot be known (its supervisor
    /// died with it, the sandbox was lost).
    Lost,
}

/// A saved sandbox filesystem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRef {
    pub backend: String,
    pub id: String,
    pub size_bytes: u64,
    /// Unix milliseconds.
    pub created_at_ms: i64,
    /// The image the snapshot sits on, for backends whose snapshots are
    /// layers over an image.
    pub base_image: Option<String>,
    /// Hex sha256 of the stored object, for snapshots kept in an object
    /// store: a restore refuses an object that does not match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl SnapshotRef {
    /// Its id, when backend `kind` made it: a backend restores only its
    /// own snapshots (a session moved to another backend starts afresh).
    pub fn id_for(&self, kind: &str) -> Result<&str> {
        if self.backend == kind {
            Ok(&self.id)
        } else {
            Err(SandboxError::Fatal(anyhow::anyhow!(
                "snapshot {} was made by the {} backend, not {kind}",
                self.id,
                self.backend
            )))
        }
    }
}

/// A chunk of a process's combined output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputChunk {
    pub data: Vec<u8>,
    /// Offset to pass to the next read.
    pub next_offset: u64,
}

/// The CPU architecture of a backend's sandboxes, which chooses the
/// `devin-remote` build put into them (not the orchestrator's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The architecture of the machine this process runs on: that of the
    /// sandboxes of backends that run them on this machine (host, local).
    pub fn current() -> Self {
        match std::env::consts::ARCH {
            "aarch64" => Self::Aarch64,
            _ => Self::X86_64,
        }
    }

    /// Reads `x86_64`/`amd64`/`x64` or `aarch64`/`arm64`, for settings.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "x86_64" | "amd64" | "x64" => Some(Self::X86_64),
            "aarch64" | "arm64" => Some(Self::Aarch64),
            _ => None,
        }
    }
}

impl Default for Arch {
    /// This machine's architecture.
    fn default() -> Self {
        Self::current()
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        })
    }
}

/// Where machines and images commonly keep Chrome/Chromium, most likely
/// first: what an imported image and the host are searched for, for
/// `DEVIN_CHROME_PATH`.
pub const CHROME_CANDIDATES: &[&str] = &[
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/headless-shell/headless-shell",
];

/// What a process in a sandbox runs as and what the machine offers the
/// remote beyond the common ground: the spawn contract's `USER`/`LOGNAME`,
/// `DEVIN_CHROME_PATH` and desktop come from here, never from Garrison's
/// own environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInfo {
    /// The user processes in the sandbox run as (`USER`, `LOGNAME`).
    pub user: String,
    /// An executable Chrome/Chromium inside the sandbox, if it has one.
    pub chrome_path: Option<String>,
    /// The X display of a desktop running in the sandbox (`DISPLAY`), when
    /// the backend provides one.
    pub display: Option<String>,
}

impl Default for MachineInfo {
    /// Root, no browser, no desktop: what a fresh cloud sandbox offers.
    fn default() -> Self {
        Self {
            user: "root".to_owned(),
            chrome_path: None,
            display: None,
        }
    }
}

/// What a backend can do beyond the common ground.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The operating system of the sandboxes: the outposts' `platform` the
    /// backend can serve.
    pub os: Os,
    /// The architecture of the sandboxes (the `devin-remote` build they get).
    pub arch: Arch,
    /// `suspend`/`resume` keep memory as well as disk.
    pub suspend_keeps_memory: bool,
    /// Network policies are enforced, not just accepted.
    pub enforces_network_policy: bool,
    /// A process can be started again after the sandbox restarts (restore).
    pub snapshots: bool,
}

/// Errors every backend maps its failures onto, so the orchestrator can
/// decide without knowing the backend.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox, process or snapshot no longer exists.
    #[error("gone: {0}")]
    Gone(String),
    /// Worth retrying later: a timeout, a rate limit, a busy backend.
    #[error("transient: {0:#}")]
    Transient(anyhow::Error),
    /// Retrying will not help: a bad spec, a missing prerequisite.
    #[error("{0:#}")]
    Fatal(anyhow::Error),
    #[error("{0} is not supported by this backend")]
    Unsupported(&'static str),
    /// A snapshot failed its integrity check (its content hash, its
    /// decryption): it is kept untouched for inspection.
    #[error("{0}")]
    Corrupt(String),
    /// A snapshot that is intact but cannot be restored, for a reason
    /// retrying cannot mend (a path deeper than the host's `PATH_MAX`, an
    /// unpack that outlasts its time bound): it is kept untouched for the
    /// operator. The text is bounded.
    #[error("{0}")]
    Unrestorable(String),
}

impl SandboxError {
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Gone(_))
    }
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Self::Corrupt(_))
    }
    pub fn is_unrestorable(&self) -> bool {
        matches!(self, Self::Unrestorable(_))
    }
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

/// One sandbox backend. Every method is idempotent where the name suggests
/// it (`destroy` of a gone sandbox succeeds) and safe to call again after an
/// orchestrator restart with the stored [`Handle`] and [`ProcessRef`].
#[async_trait]
pub trait Sandbox: Send + Sync + 'static {
    /// Short backend name: `host`, `local`, `tensorlake`, `modal`.
    fn kind(&self) -> &'static str;

    fn capabilities(&self) -> Capabilities;

    /// Creates and starts a sandbox, restored from `spec.restore_from` when
    /// given. Creating a sandbox whose name exists already is an error.
    async fn create(&self, spec: &SandboxSpec) -> Result<Handle>;

    /// Writes a file inside the sandbox (parents created).
    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()>;

    /// Puts an executable at `path` inside the sandbox (parents created),
    /// replacing whatever was there at once, as [`Sandbox::put_file`] does.
    /// `sha256` is the lowercase hex SHA-256 of `bytes`, which the caller
    /// has verified: the same binary put into many sandboxes (the
    /// `devin-remote` of every session) is named by it.
    ///
    /// The file can be read and executed by its owner; whether it can be
    /// written is the backend's choice (a shared copy is read-only). A
    /// process in the sandbox that changes it changes its own sandbox's
    /// copy only as far as the backend isolates sandboxes at all.
    ///
    /// The default writes the bytes with mode 0755 through
    /// [`Sandbox::put_file`]. A backend that can share one stored copy among
    /// its sandboxes overrides it, so a burst of starts does not write the
    /// same megabytes once per session.
    async fn put_executable(
        &self,
        handle: &Handle,
        path: &str,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<()> {
        let _ = sha256;
        self.put_file(handle, path, bytes, 0o755).await
    }

    /// Starts a detached process: it keeps running if the orchestrator
    /// exits, and [`Sandbox::status`] still reports its exit code afterwards.
    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> Result<ProcessRef>;

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus>;

    /// Sends SIGTERM, waits up to `grace`, then SIGKILL. A process that is
    /// already gone is not an error.
    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()>;

    /// Reads the process's combined stdout and stderr from `offset`.
    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk>;

    /// Saves the sandbox's filesystem (workspace and state). The sandbox
    /// keeps running; the caller destroys it afterwards if it wants to.
    async fn snapshot(&self, handle: &Handle) -> Result<SnapshotRef>;

    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> Result<bool>;

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<()>;

    /// Snapshots of the sandbox called `name` that the backend can find
    /// without the state store (for example in a snapshot directory shared
    /// by several Garrison processes), newest last.
    async fn snapshots_for(&self, _name: &SandboxName) -> Result<Vec<SnapshotRef>> {
        Ok(Vec::new())
    }

    /// Deletes the snapshots in a store several Garrisons share that were
    /// made before `cutoff_ms` (Unix ms), whichever Garrison made them, and
    /// returns them: retention across hosts. A backend without such a
    /// store has nothing to collect.
    async fn collect_snapshots_older_than(&self, _cutoff_ms: i64) -> Result<Vec<SnapshotRef>> {
        Ok(Vec::new())
    }

    /// Stops every process and removes the sandbox. Gone is success.
    async fn destroy(&self, handle: &Handle) -> Result<()>;

    /// Every sandbox this backend made and has not destroyed, with labels,
    /// so leftovers of a crash can be found and cleaned.
    async fn list(&self) -> Result<Vec<Handle>>;

    /// The sandbox of this name, if this backend has it. Every start of a
    /// new session asks, so a backend that can look one name up without
    /// listing every sandbox it holds should.
    async fn find(&self, name: &SandboxName) -> Result<Option<Handle>> {
        Ok(self
            .list()
            .await?
            .into_iter()
            .find(|h| h.name == name.as_str()))
    }

    /// The gateway URL as a process inside the sandbox must dial it: a
    /// backend whose sandboxes see the host under another address rewrites
    /// a loopback URL to it.
    fn gateway_url_for(&self, _handle: &Handle, url: &str) -> String {
        url.to_owned()
    }

    /// The user, browser and desktop of the sandbox (see [`MachineInfo`]).
    /// The default, root without a browser or a desktop, fits a cloud
    /// sandbox whose processes run as root on a bare image.
    async fn machine(&self, _handle: &Handle) -> Result<MachineInfo> {
        Ok(MachineInfo::default())
    }

    /// Applies a changed network policy to a running sandbox (the gateway
    /// stays allowed). Backends that do not enforce policies accept it and
    /// do nothing (see [`Capabilities::enforces_network_policy`]).
    async fn update_network_policy(
        &self,
        _handle: &Handle,
        _policy: &common::NetworkPolicy,
    ) -> Result<()> {
        Ok(())
    }

    /// Pauses the sandbox keeping its memory (see [`Capabilities`]).
    async fn suspend(&self, _handle: &Handle) -> Result<()> {
        Err(SandboxError::Unsupported("suspend"))
    }

    async fn resume(&self, _handle: &Handle) -> Result<()> {
        Err(SandboxError::Unsupported("resume"))
    }
}

/// Polls [`Sandbox::status`] until the process is no longer running.
pub async fn wait_exit(
    sandbox: &dyn Sandbox,
    handle: &Handle,
    process: &ProcessRef,
    poll: Duration,
) -> Result<ProcessStatus> {
    loop {
        match sandbox.status(handle, process).await? {
            ProcessStatus::Running => tokio::time::sleep(poll).await,
            done => return Ok(done),
        }
    }
}
