//! What the orchestrator hands a backend and gets back: specs of
//! sandboxes and processes, and the plain serializable references it
//! stores ([`Handle`], [`ProcessRef`], [`SnapshotRef`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Result, SandboxError};
use crate::lineage::Lineage;
use crate::names::SandboxName;

/// Compute and disk given to one sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// Virtual CPUs.
    pub cpus: f64,
    /// Memory, MiB.
    pub memory_mb: u64,
    /// Disk, MiB.
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
    /// What egress is allowed.
    pub policy: common::NetworkPolicy,
    /// The gateway URL the remote must reach (host and port are allowed
    /// whatever the policy says).
    pub gateway_url: Option<String>,
}

/// Everything needed to create one sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The sandbox's name, derived from the session.
    pub name: SandboxName,
    /// Stored with the sandbox (see [`crate::session_labels`]).
    pub labels: BTreeMap<String, String>,
    /// Backend-specific image reference; `None` is the backend's default.
    pub image: Option<String>,
    /// Start from this snapshot's filesystem instead of a fresh one.
    pub restore_from: Option<SnapshotRef>,
    /// Compute and disk.
    pub resources: Resources,
    /// What the network may reach.
    pub network: NetworkSpec,
}

/// A created sandbox, as stored by the orchestrator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handle {
    /// The backend that made it ([`Sandbox::kind`](crate::Sandbox::kind)).
    pub backend: String,
    /// The backend's own id for the sandbox.
    pub id: String,
    /// The sandbox's name ([`SandboxSpec::name`]).
    pub name: String,
    /// The labels it was made with.
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
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The complete environment: nothing else is inherited.
    pub env: BTreeMap<String, String>,
    /// The working directory, as the sandbox sees it.
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
    /// The process's name within its sandbox ([`ProcessSpec::name`]).
    pub id: String,
}

/// What became of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "code")]
pub enum ProcessStatus {
    /// Still running.
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
    /// The backend that made it ([`Sandbox::kind`](crate::Sandbox::kind)).
    pub backend: String,
    /// The backend's id for it; starts with the sandbox's name.
    pub id: String,
    /// Its stored size.
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
    /// The lineage of the sandbox it was taken of (from its labels); `None`
    /// for snapshots taken before lineages, or of a sandbox without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<Lineage>,
}

impl SnapshotRef {
    /// The key to order a session's snapshots by, oldest workspace first:
    /// by generation; within one generation by when the sandbox was made
    /// (two sandboxes of one generation were both restored from the same
    /// snapshot, the later by the host that claimed the session later),
    /// then by when the snapshot was taken (within one sandbox, one host's
    /// clock), then by id. Snapshots without a lineage come first: they
    /// are older than any sandbox that has one. Creation time alone is not
    /// enough: a host that lost its claim can upload late, and hosts'
    /// clocks differ.
    pub fn resume_order(&self) -> (Option<(u64, i64)>, i64, &str) {
        (
            self.lineage
                .map(|l| (l.generation, l.sandbox_created_at_ms)),
            self.created_at_ms,
            &self.id,
        )
    }

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
    /// The bytes read.
    pub data: Vec<u8>,
    /// Offset to pass to the next read.
    pub next_offset: u64,
}
