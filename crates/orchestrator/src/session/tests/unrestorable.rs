//! A snapshot the backend cannot restore (`SandboxError::Unrestorable`):
//! the start fails once, the claim goes back with the reason, the snapshot
//! stays, the session is marked so it is not claimed here again, and what
//! is kept of the (huge) error is bounded.

use async_trait::async_trait;
use sandbox::{
    Capabilities, OutputChunk, ProcessSpec, ProcessStatus, Sandbox, SandboxError, SnapshotRef,
};

use super::*;
use crate::store::{SnapshotReason, StoredSnapshot};

/// The host backend, except that every restore fails as one that cannot
/// succeed, with a message as long as tar's was for a crafted snapshot.
struct CannotRestore(Arc<HostBackend>);

const TAR_SAID: &str = "tar: ./qqqq/qqqq: Cannot mkdir: File name too long\n";

#[async_trait]
impl Sandbox for CannotRestore {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    async fn create(&self, spec: &SandboxSpec) -> sandbox::Result<Handle> {
        if spec.restore_from.is_some() {
            return Err(SandboxError::Unrestorable(TAR_SAID.repeat(100_000)));
        }
        self.0.create(spec).await
    }
    async fn put_file(
        &self,
        handle: &Handle,
        path: &str,
        bytes: &[u8],
        mode: u32,
    ) -> sandbox::Result<()> {
        self.0.put_file(handle, path, bytes, mode).await
    }
    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> sandbox::Result<ProcessRef> {
        self.0.spawn(handle, process).await
    }
    async fn status(
        &self,
        handle: &Handle,
        process: &ProcessRef,
    ) -> sandbox::Result<ProcessStatus> {
        self.0.status(handle, process).await
    }
    async fn kill(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        grace: Duration,
    ) -> sandbox::Result<()> {
        self.0.kill(handle, process, grace).await
    }
    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> sandbox::Result<OutputChunk> {
        self.0.read_output(handle, process, offset, max).await
    }
    async fn snapshot(&self, handle: &Handle) -> sandbox::Result<SnapshotRef> {
        self.0.snapshot(handle).await
    }
    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> sandbox::Result<bool> {
        self.0.snapshot_exists(snapshot).await
    }
    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> sandbox::Result<()> {
        self.0.delete_snapshot(snapshot).await
    }
    async fn destroy(&self, handle: &Handle) -> sandbox::Result<()> {
        self.0.destroy(handle).await
    }
    async fn list(&self) -> sandbox::Result<Vec<Handle>> {
        self.0.list().await
    }
}

#[tokio::test]
async fn a_snapshot_that_cannot_be_restored_is_given_up_once_and_kept() {
    let world = World::new().await;
    let made = world.sandbox().await;
    let snapshot = world.backend.snapshot(&made).await.unwrap();
    world.backend.destroy(&made).await.unwrap();
    world
        .store
        .add_snapshot(&StoredSnapshot {
            session_id: fleet::SessionId::new(SESSION).unwrap(),
            reason: SnapshotReason::Suspend,
            snapshot: snapshot.clone(),
        })
        .unwrap();
    let mut rec = record(Stage::Claimed, None);
    rec.kind = SessionKind::Resume;
    world.store.put_session(&rec).unwrap();
    let backend = Arc::new(CannotRestore(world.backend.clone()));

    let runner = world.runner_on(rec, claim_response(), backend);
    assert_eq!(
        run(runner).await,
        RunnerEnd::Stage(Stage::Done(Finish::Released))
    );

    // Given back once, with the reason, after one attempt.
    assert_eq!(world.releases(), 1);
    let kept = world
        .store
        .session(&fleet::SessionId::new(SESSION).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(kept.start_failures, 0, "no retry counted");
    let error = kept.error.unwrap();
    assert!(error.contains("cannot be restored here"), "{error}");
    assert!(error.contains("File name too long"), "{error}");
    assert!(
        error.len() < 10 << 10,
        "{} bytes of error kept",
        error.len()
    );
    let events = world
        .store
        .events(&fleet::SessionId::new(SESSION).unwrap(), 0)
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "start_given_up").count(),
        1,
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"start_failed"), "{kinds:?}");
    for event in &events {
        assert!(event.detail.to_string().len() < 20 << 10, "{}", event.kind);
    }
    let log = world
        .dir
        .path()
        .join("sessions")
        .join(sandbox::hashed_id(SESSION))
        .join(crate::session_log::EVENTS_LOG);
    let lines = std::fs::read_to_string(log).unwrap();
    assert!(lines.lines().all(|l| l.len() < 20 << 10));

    // The snapshot is kept for the operator, and the session is marked so
    // this Garrison does not claim it again.
    assert!(world.backend.snapshot_exists(&snapshot).await.unwrap());
    assert_eq!(
        world
            .store
            .snapshots(&fleet::SessionId::new(SESSION).unwrap())
            .unwrap()
            .len(),
        1
    );
    let mark = world
        .store
        .unrestorable_session(&fleet::SessionId::new(SESSION).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(mark.snapshot_id, snapshot.id);
    assert!(world.store.unrestorable_ids().unwrap().contains(SESSION));
}
