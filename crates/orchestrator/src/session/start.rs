//! The start step: a sandbox for the session (the one kept suspended, one
//! restored from a snapshot, or a fresh one), the remote binary in it, the
//! repositories cloned, the remote started.

use std::time::Duration;

use anyhow::Context;
use fleet::QueueEntry;
use sandbox::{Handle, SandboxName, SandboxSpec, SnapshotRef};
use serde_json::json;
use tracing::{error, info, warn};

use super::SessionRunner;
use crate::contract;
use crate::metrics::Metrics;
use crate::planner::{Finish, Stage};

pub(super) enum StartError {
    /// The session must not be started at all (the binary failed
    /// verification): release the claim.
    Refused(String),
    /// Too little claim time left for the next slow step.
    Deadline,
    Failed(anyhow::Error),
}

impl SessionRunner {
    /// The entry as claimed (for its pinned SHA and network policy).
    pub(super) async fn current_entry(&mut self) -> anyhow::Result<QueueEntry> {
        if let Some(entry) = &self.entry {
            return Ok(entry.clone());
        }
        let entry = self
            .deps
            .client
            .get(self.id())
            .await?
            .context("the entry is gone")?;
        self.entry = Some(entry.clone());
        Ok(entry)
    }

    pub(super) async fn start(&mut self) {
        let started = std::time::Instant::now();
        match self.try_start().await {
            Ok(()) => {
                self.deps
                    .metrics
                    .record_sandbox_start(started.elapsed().as_secs_f64() * 1000.0);
            }
            Err(StartError::Refused(reason)) => {
                error!(
                    session_id = self.id(),
                    reason, "refusing to start the session"
                );
                self.rec.error = Some(reason.clone());
                self.event("start_refused", json!({ "reason": reason }));
                self.set_stage(Stage::Finishing(Finish::Released));
            }
            Err(StartError::Deadline) => {
                // The planner renews next; nothing failed.
            }
            Err(StartError::Failed(e)) => {
                self.rec.start_failures += 1;
                let message = self.deps.logs.redactor().scrub(&format!("{e:#}"));
                warn!(session_id = self.id(), attempt = self.rec.start_failures, error = %message, "starting the session failed");
                self.rec.error = Some(message.clone());
                self.event(
                    "start_failed",
                    json!({ "error": message, "attempt": self.rec.start_failures }),
                );
                self.save();
                self.pause(Duration::from_secs(1)).await;
            }
        }
    }

    pub(super) async fn try_start(&mut self) -> Result<(), StartError> {
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        let entry = self.current_entry().await.map_err(StartError::Failed)?;
        let pinned = entry.spec.remote_binary_sha.clone();
        let remote = match self.deps.resolver.resolve(pinned.as_deref()).await {
            Ok(remote) => remote,
            Err(e) if e.is_checksum_mismatch() => {
                Metrics::inc(&self.deps.metrics.checksum_refusals);
                return Err(StartError::Refused(e.to_string()));
            }
            Err(e) => return Err(StartError::Failed(e.into())),
        };
        self.rec.remote_sha = Some(remote.sha.clone());
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }

        if self.rec.stage == Stage::Claimed {
            self.set_stage(Stage::Starting);
            self.event(
                "starting",
                json!({ "remote_sha": remote.sha, "backend": self.deps.backend.kind() }),
            );
        }
        let name = SandboxName::for_session(self.id());
        let kept = match self.find_sandbox(&name).await.map_err(StartError::Failed)? {
            Some(found) => self.resume_kept(found).await.map_err(StartError::Failed)?,
            None => None,
        };
        let (handle, restored) = match kept {
            Some(handle) => (handle, true),
            None => self.create_sandbox(&name, &entry).await?,
        };
        self.rec.handle = Some(handle.clone());
        self.save();
        self.event("sandbox_created", json!({ "sandbox": handle.name }));

        let bytes = self
            .deps
            .resolver
            .verified_bytes(&remote)
            .await
            .map_err(|e| {
                if e.is_checksum_mismatch() {
                    StartError::Refused(e.to_string())
                } else {
                    StartError::Failed(e.into())
                }
            })?;
        let path = format!("{}/{}", handle.bin_dir, contract::REMOTE_BINARY);
        self.deps
            .backend
            .put_file(&handle, &path, &bytes, 0o755)
            .await
            .map_err(|e| StartError::Failed(e.into()))?;
        // A restored or resumed workspace has its repositories already.
        if !restored {
            self.clone_repos(&handle).await?;
        }
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        self.spawn_remote().await.map_err(StartError::Failed)
    }

    /// The sandbox this resume claim's session was suspended in, running
    /// again, on a backend whose suspend keeps memory. Any other sandbox
    /// found under the session's name is left by an interrupted start and
    /// never ran a remote (the process is recorded before it is spawned):
    /// it is destroyed, to start over cleanly.
    pub(super) async fn resume_kept(&mut self, found: Handle) -> anyhow::Result<Option<Handle>> {
        let backend = self.deps.backend.clone();
        if self.rec.kind == "resume"
            && self.rec.process.is_none()
            && backend.capabilities().suspend_keeps_memory
        {
            match backend.resume(&found).await {
                Ok(()) => {
                    info!(
                        session_id = self.id(),
                        sandbox = found.name,
                        "resumed the suspended sandbox"
                    );
                    self.event("sandbox_resumed", json!({ "sandbox": found.name }));
                    return Ok(Some(found));
                }
                Err(e) if e.is_gone() => {
                    warn!(
                        session_id = self.id(),
                        "the suspended sandbox is gone; restoring from the snapshot"
                    );
                    return Ok(None);
                }
                // A passing failure must not cost the kept memory: this
                // start fails and is tried again, the sandbox kept.
                Err(e) if e.is_transient() => return Err(e.into()),
                Err(e) => {
                    warn!(session_id = self.id(), error = %e, "resuming the suspended sandbox failed; restoring from the snapshot");
                }
            }
        }
        backend.destroy(&found).await?;
        Ok(None)
    }

    /// A new sandbox, restored from the newest snapshot when there is one
    /// (a fresh one if that snapshot is gone); whether it was restored.
    pub(super) async fn create_sandbox(
        &mut self,
        name: &SandboxName,
        entry: &QueueEntry,
    ) -> Result<(Handle, bool), StartError> {
        let name = name.clone();
        let restore = self.latest_snapshot(&name).await;
        let mut spec = SandboxSpec {
            name: name.clone(),
            labels: {
                let mut labels = sandbox::session_labels(self.id(), &self.rec.outpost_id);
                labels.insert(
                    sandbox::LABEL_ACCEPTOR_ID.to_owned(),
                    self.deps.acceptor_id.clone(),
                );
                labels
            },
            image: self.deps.outpost.image.clone(),
            restore_from: restore.clone(),
            resources: self.deps.outpost.resources,
            network: sandbox::NetworkSpec {
                policy: entry.spec.network_policy.clone(),
                gateway_url: self.claim.gateway_url.clone(),
            },
        };
        let handle = match self.deps.backend.create(&spec).await {
            Err(e) if e.is_gone() && restore.is_some() => {
                warn!(
                    session_id = self.id(),
                    "the snapshot to resume from is gone; starting a fresh sandbox"
                );
                self.event("snapshot_missing", json!({}));
                spec.restore_from = None;
                self.deps.backend.create(&spec).await
            }
            other => other,
        }
        .map_err(|e| StartError::Failed(e.into()))?;
        if let Some(snapshot) = &spec.restore_from {
            self.event(
                "restored",
                json!({ "snapshot": snapshot.id, "bytes": snapshot.size_bytes }),
            );
        }
        Ok((handle, spec.restore_from.is_some()))
    }

    pub(super) async fn find_sandbox(&self, name: &SandboxName) -> anyhow::Result<Option<Handle>> {
        if let Some(handle) = &self.rec.handle {
            return Ok(Some(handle.clone()));
        }
        Ok(self
            .deps
            .backend
            .list()
            .await?
            .into_iter()
            .find(|h| h.name == name.as_str()))
    }

    /// The newest snapshot of the session, from the state store or, for a
    /// session another Garrison suspended, from the backend's shared store.
    pub(super) async fn latest_snapshot(&self, name: &SandboxName) -> Option<SnapshotRef> {
        for snapshot in self.known_snapshots(name).await.into_iter().rev() {
            if self
                .deps
                .backend
                .snapshot_exists(&snapshot)
                .await
                .unwrap_or(false)
            {
                return Some(snapshot);
            }
        }
        if self.rec.kind == "resume" {
            warn!(
                session_id = self.id(),
                "no snapshot to resume from; starting a fresh sandbox"
            );
            self.event("snapshot_missing", json!({}));
        }
        None
    }
}
