//! The backend under test, and the few steps every check takes with it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::{
    Handle, ProcessRef, ProcessSpec, ProcessStatus, Resources, Sandbox, SandboxName, SandboxSpec,
};

/// A backend under test, and a way to get a fresh instance of it (the same
/// configuration, nothing kept in memory) to prove that sandboxes and
/// processes survive an orchestrator restart.
pub struct Harness {
    /// The backend under test.
    pub backend: Arc<dyn Sandbox>,
    /// A fresh instance of the same backend, as after a restart.
    pub reopen: Box<dyn Fn() -> Arc<dyn Sandbox> + Send + Sync>,
    /// Passed as the image of every sandbox the suite creates.
    pub image: Option<String>,
    /// The backend implements [`Sandbox::snapshots_for`].
    pub finds_snapshots_by_name: bool,
}

/// Bounds a hung check; never an assertion about speed.
const HANG_GUARD: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(25);

impl Harness {
    pub(super) fn spec(&self, label: &str) -> SandboxSpec {
        let session = format!("conformance-{label}-{:016x}", rand::random::<u64>());
        let mut labels = BTreeMap::from([
            (crate::LABEL_SESSION_ID.to_owned(), session.clone()),
            (
                crate::LABEL_OUTPOST_ID.to_owned(),
                "outpost_conformance".to_owned(),
            ),
        ]);
        // As the orchestrator labels every sandbox it makes; a generation
        // no session starts at, so a backend cannot pass by accident.
        crate::next_lineage(6, 1_700_000_000_123).add_to_labels(&mut labels);
        SandboxSpec {
            name: SandboxName::for_session(&session),
            labels,
            image: self.image.clone(),
            restore_from: None,
            resources: Resources {
                cpus: 1.0,
                memory_mb: 512,
                disk_mb: 1024,
            },
            network: Default::default(),
        }
    }

    pub(super) async fn create(&self, label: &str) -> anyhow::Result<Handle> {
        Ok(self.backend.create(&self.spec(label)).await?)
    }

    pub(super) async fn sh(&self, handle: &Handle, script: &str) -> anyhow::Result<ProcessRef> {
        let spec = ProcessSpec {
            name: format!("sh-{:08x}", rand::random::<u32>()),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: BTreeMap::from([("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())]),
            cwd: handle.workdir.clone(),
        };
        Ok(self.backend.spawn(handle, &spec).await?)
    }

    pub(super) async fn wait(
        &self,
        backend: &dyn Sandbox,
        handle: &Handle,
        process: &ProcessRef,
    ) -> anyhow::Result<ProcessStatus> {
        tokio::time::timeout(HANG_GUARD, crate::wait_exit(backend, handle, process, POLL))
            .await
            .context("process did not finish")?
            .map_err(Into::into)
    }

    pub(super) async fn output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
    ) -> anyhow::Result<String> {
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let chunk = self
                .backend
                .read_output(handle, process, offset, 64 * 1024)
                .await?;
            if chunk.data.is_empty() {
                break;
            }
            offset = chunk.next_offset;
            out.extend(chunk.data);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Runs a script to completion and returns its exit code and output.
    pub(super) async fn run(
        &self,
        handle: &Handle,
        script: &str,
    ) -> anyhow::Result<(ProcessStatus, String)> {
        let process = self.sh(handle, script).await?;
        let status = self.wait(self.backend.as_ref(), handle, &process).await?;
        Ok((status, self.output(handle, &process).await?))
    }
}
