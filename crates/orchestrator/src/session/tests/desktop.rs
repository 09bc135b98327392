//! The desktop kept alive: while the remote runs, each look has the
//! backend check the sandbox's desktop, and a restart it reports lands in
//! the session's event log as `desktop_restarted`, with its reason.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use sandbox::{Capabilities, DesktopState, OutputChunk, ProcessSpec, ProcessStatus, SnapshotRef};

use super::*;

/// The host backend, with a remote that runs and a desktop that had died
/// at the first check and answers after.
struct DyingDesktop {
    inner: Arc<HostBackend>,
    checks: AtomicUsize,
}

#[async_trait]
impl Sandbox for DyingDesktop {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn create(&self, spec: &SandboxSpec) -> sandbox::Result<Handle> {
        self.inner.create(spec).await
    }
    async fn keep_desktop(&self, _handle: &Handle) -> sandbox::Result<DesktopState> {
        Ok(match self.checks.fetch_add(1, Ordering::SeqCst) {
            0 => DesktopState::Restarted {
                reason: "the X server was not running".into(),
            },
            _ => DesktopState::Answering,
        })
    }
    async fn put_file(
        &self,
        handle: &Handle,
        path: &str,
        bytes: &[u8],
        mode: u32,
    ) -> sandbox::Result<()> {
        self.inner.put_file(handle, path, bytes, mode).await
    }
    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> sandbox::Result<ProcessRef> {
        self.inner.spawn(handle, process).await
    }
    /// The remote runs (no process is started: the test's host backend
    /// has no shim).
    async fn status(
        &self,
        _handle: &Handle,
        _process: &ProcessRef,
    ) -> sandbox::Result<ProcessStatus> {
        Ok(ProcessStatus::Running)
    }
    async fn kill(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        grace: Duration,
    ) -> sandbox::Result<()> {
        self.inner.kill(handle, process, grace).await
    }
    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> sandbox::Result<OutputChunk> {
        self.inner.read_output(handle, process, offset, max).await
    }
    async fn snapshot(&self, handle: &Handle) -> sandbox::Result<SnapshotRef> {
        self.inner.snapshot(handle).await
    }
    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> sandbox::Result<bool> {
        self.inner.snapshot_exists(snapshot).await
    }
    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> sandbox::Result<()> {
        self.inner.delete_snapshot(snapshot).await
    }
    async fn destroy(&self, handle: &Handle) -> sandbox::Result<()> {
        self.inner.destroy(handle).await
    }
    async fn list(&self) -> sandbox::Result<Vec<Handle>> {
        self.inner.list().await
    }
}

#[tokio::test]
async fn a_restarted_desktop_is_recorded_once_in_the_event_log() {
    let world = World::new().await;
    let handle = world.sandbox().await;
    let remote = ProcessRef {
        id: "remote-1".into(),
    };
    let backend = Arc::new(DyingDesktop {
        inner: world.backend.clone(),
        checks: AtomicUsize::new(0),
    });
    let mut rec = record(Stage::Running, Some(handle.clone()));
    rec.process = Some(remote.clone());
    let mut runner = world.runner_on(rec, claim_response(), backend.clone());

    runner.observe().await;
    runner.observe().await;
    world
        .backend
        .kill(&handle, &remote, Duration::ZERO)
        .await
        .unwrap();

    assert_eq!(
        backend.checks.load(Ordering::SeqCst),
        2,
        "checked at each look"
    );
    let events = world
        .store
        .events(&fleet::SessionId::new(SESSION).unwrap(), 0)
        .unwrap();
    let restarts: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "desktop_restarted")
        .collect();
    assert_eq!(restarts.len(), 1, "{events:?}");
    assert_eq!(
        restarts[0].detail["reason"], "the X server was not running",
        "{:?}",
        restarts[0].detail
    );
}
