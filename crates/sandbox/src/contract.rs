//! The one trait every backend implements, and waiting on it.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Result, SandboxError};
use crate::machine::{Capabilities, MachineInfo};
use crate::names::SandboxName;
use crate::snapshot_store;
use crate::spec::{
    Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, SandboxSpec, SnapshotRef,
};

/// One sandbox backend. Every method is idempotent where the name suggests
/// it (`destroy` of a gone sandbox succeeds) and safe to call again after an
/// orchestrator restart with the stored [`Handle`] and [`ProcessRef`].
#[async_trait]
pub trait Sandbox: Send + Sync + 'static {
    /// Short backend name: `host`, `local`, `tensorlake`, `modal`.
    fn kind(&self) -> &'static str;

    /// What the backend's sandboxes are and can do.
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

    /// What became of a process.
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

    /// The [`SnapshotStore`](snapshot_store::SnapshotStore) the backend
    /// keeps its snapshots in, when it uses Garrison's own (host, local):
    /// the four methods below then answer from it, with no code of the
    /// backend's. `None` (the default) for a backend with its own store.
    fn snapshot_store(&self) -> Option<&snapshot_store::SnapshotStore> {
        None
    }

    /// Whether `snapshot` can still be restored. A backend without a
    /// [`Sandbox::snapshot_store`] must implement it.
    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        match self.snapshot_store() {
            Some(store) => store.exists(snapshot).await,
            None => Err(SandboxError::Unsupported("snapshot_exists")),
        }
    }

    /// Deletes `snapshot`; a missing one is not an error. A backend
    /// without a [`Sandbox::snapshot_store`] must implement it.
    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<()> {
        match self.snapshot_store() {
            Some(store) => store.delete(snapshot).await,
            None => Err(SandboxError::Unsupported("delete_snapshot")),
        }
    }

    /// Snapshots of the sandbox called `name` that the backend can find
    /// without the state store (for example in a snapshot directory shared
    /// by several Garrison processes), newest last.
    async fn snapshots_for(&self, name: &SandboxName) -> Result<Vec<SnapshotRef>> {
        match self.snapshot_store() {
            Some(store) => store.find_for(name).await,
            None => Ok(Vec::new()),
        }
    }

    /// Deletes the snapshots in a store several Garrisons share that were
    /// made before `cutoff_ms` (Unix ms), whichever Garrison made them, and
    /// returns them: retention across hosts. A backend without such a
    /// store has nothing to collect.
    async fn collect_snapshots_older_than(&self, cutoff_ms: i64) -> Result<Vec<SnapshotRef>> {
        match self.snapshot_store() {
            Some(store) => store.collect_older_than(cutoff_ms).await,
            None => Ok(Vec::new()),
        }
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

    /// Removes what an interrupted create of `name` left: a sandbox begun
    /// but never finished (its Garrison killed part way), which neither
    /// [`find`](Sandbox::find) nor [`list`](Sandbox::list) reports, so no
    /// destroy would ever reach it. No process ran in it. `true` if there
    /// were remains. Only for a name no create of this process is making;
    /// a finished sandbox of the name is left alone. A backend whose create
    /// leaves nothing unlisted has nothing to remove.
    async fn remove_remains(&self, name: &SandboxName) -> Result<bool> {
        let _ = name;
        Ok(false)
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

    /// Looks after the sandbox's desktop: checks that its X server
    /// answers and starts it again when it died or hangs. Called often
    /// while a session runs (and first after a sandbox is re-adopted), so
    /// it must be cheap when all is well. The default: no desktop to keep.
    async fn keep_desktop(&self, _handle: &Handle) -> Result<crate::DesktopState> {
        Ok(crate::DesktopState::NoDesktop)
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

    /// Why this backend's suspend does not keep the sandbox's processes,
    /// or `None` when it does ([`Capabilities::suspend_keeps_memory`]). The
    /// conformance check that processes survive a suspend is skipped with
    /// it, and `garrison doctor` shows it. A backend that knows why (the
    /// runtime, the host) says so instead of the default's plain fact.
    fn memory_suspend_unavailable(&self) -> Option<String> {
        (!self.capabilities().suspend_keeps_memory).then(|| {
            format!(
                "the {} backend's suspend keeps the filesystem only, not processes",
                self.kind()
            )
        })
    }

    /// Pauses the sandbox keeping its memory (see [`Capabilities`]).
    async fn suspend(&self, _handle: &Handle) -> Result<()> {
        Err(SandboxError::Unsupported("suspend"))
    }

    /// Wakes a sandbox [`Sandbox::suspend`] put to sleep.
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
