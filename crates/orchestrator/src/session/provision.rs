//! The sandbox a start uses, one step at a time as [`plan_start`] decides:
//! the sandbox kept suspended resumed, a leftover destroyed, one restored
//! from the newest snapshot, or a fresh one. Each step's outcome goes back
//! to the planner, which picks the fallback.

use anyhow::Context;
use fleet::QueueEntry;
use sandbox::{Handle, SandboxError, SandboxName, SandboxSpec, SnapshotRef};
use serde_json::json;
use tracing::{info, warn};

use super::{SessionRunner, StartError, keep_claim_alive};
use crate::planner::{FreshReason, SnapshotObs, StartFailure, StartObs, StartPlan, plan_start};

impl SessionRunner {
    /// A sandbox for the session, and whether it already holds the
    /// session's workspace (resumed or restored).
    pub(super) async fn provision(
        &mut self,
        entry: &QueueEntry,
    ) -> Result<(Handle, bool), StartError> {
        let name = SandboxName::for_session(self.id());
        let mut found = self.find_sandbox(&name).await.map_err(StartError::Failed)?;
        let mut snapshot: Option<SnapshotRef> = None;
        let mut obs = StartObs {
            kind: self.rec.kind.clone(),
            sandbox_found: false,
            remote_recorded: self.rec.process.is_some(),
            suspend_keeps_memory: self.deps.backend.capabilities().suspend_keeps_memory,
            snapshot: SnapshotObs::NotLookedUp,
            corrupt_snapshot_starts_fresh: self.deps.policy.corrupt_snapshot_starts_fresh,
            failed: None,
        };
        // Why the snapshot was refused, for the session's error.
        let mut refused: Option<String> = None;
        loop {
            obs.sandbox_found = found.is_some();
            let plan = plan_start(&obs);
            match plan {
                StartPlan::Reuse => {
                    let kept = found
                        .take()
                        .context("no sandbox to resume")
                        .map_err(StartError::Failed)?;
                    match self.deps.backend.resume(&kept).await {
                        Ok(()) => {
                            info!(
                                session_id = self.id(),
                                sandbox = kept.name,
                                "resumed the suspended sandbox"
                            );
                            self.event("sandbox_resumed", json!({ "sandbox": kept.name }));
                            return Ok((kept, plan.keeps_workspace()));
                        }
                        Err(e) if e.is_gone() => warn!(
                            session_id = self.id(),
                            "the suspended sandbox is gone; restoring from the snapshot"
                        ),
                        // A passing failure must not cost the kept memory:
                        // this start fails and is tried again, the sandbox
                        // kept.
                        Err(e) if e.is_transient() => return Err(StartError::Failed(e.into())),
                        Err(e) => {
                            warn!(session_id = self.id(), error = %e, "resuming the suspended sandbox failed; restoring from the snapshot");
                            obs.failed = Some(StartFailure::ResumeFailed);
                            found = Some(kept);
                        }
                    }
                }
                StartPlan::Discard => {
                    let left = found
                        .take()
                        .context("no sandbox to destroy")
                        .map_err(StartError::Failed)?;
                    self.deps
                        .backend
                        .destroy(&left)
                        .await
                        .map_err(|e| StartError::Failed(e.into()))?;
                }
                StartPlan::FindSnapshot => {
                    snapshot = self.latest_snapshot(&name).await;
                    obs.snapshot = match snapshot {
                        Some(_) => SnapshotObs::Available,
                        None => SnapshotObs::None,
                    };
                }
                StartPlan::Restore => {
                    let from = snapshot
                        .clone()
                        .context("no snapshot to restore")
                        .map_err(StartError::Failed)?;
                    match self.create_sandbox(&name, entry, Some(&from)).await {
                        Ok(handle) => {
                            self.event(
                                "restored",
                                json!({ "snapshot": from.id, "bytes": from.size_bytes }),
                            );
                            return Ok((handle, plan.keeps_workspace()));
                        }
                        Err(e) if e.is_gone() => obs.failed = Some(StartFailure::RestoreGone),
                        Err(e) if e.is_unrestorable() => {
                            let reason = sandbox::bounded_output::clip_error(&e.to_string());
                            warn!(session_id = self.id(), snapshot = from.id, error = %reason, "the snapshot cannot be restored here");
                            refused = Some(reason);
                            obs.failed = Some(StartFailure::RestoreUnrestorable);
                        }
                        Err(e) if e.is_corrupt() => {
                            warn!(session_id = self.id(), error = %e, "the snapshot failed its integrity check");
                            self.event(
                                "snapshot_refused",
                                json!({ "snapshot": from.id, "error": e.to_string() }),
                            );
                            refused = Some(e.to_string());
                            obs.failed = Some(StartFailure::RestoreCorrupt);
                        }
                        Err(e) => return Err(StartError::Failed(e.into())),
                    }
                }
                StartPlan::GiveUpUnrestorable => {
                    let snapshot_id = snapshot.as_ref().map(|s| s.id.clone()).unwrap_or_default();
                    return Err(StartError::Unrestorable {
                        snapshot_id,
                        reason: refused
                            .unwrap_or_else(|| "the snapshot cannot be restored here".to_owned()),
                    });
                }
                StartPlan::FailCorrupt => {
                    return Err(StartError::Corrupt(refused.unwrap_or_else(|| {
                        "the snapshot failed its integrity check".to_owned()
                    })));
                }
                StartPlan::Fresh(why) => {
                    let missing = match why {
                        FreshReason::New => None,
                        FreshReason::NoSnapshot => {
                            Some("no snapshot to resume from; starting a fresh sandbox")
                        }
                        FreshReason::SnapshotGone => {
                            Some("the snapshot to resume from is gone; starting a fresh sandbox")
                        }
                        FreshReason::SnapshotCorrupt => Some(
                            "the snapshot to resume from failed its integrity check (kept); \
                             starting a fresh sandbox as snapshot_integrity_fallback = fresh allows",
                        ),
                    };
                    if let Some(message) = missing {
                        warn!(session_id = self.id(), "{message}");
                        self.event("snapshot_missing", json!({}));
                    }
                    let handle = self
                        .create_sandbox(&name, entry, None)
                        .await
                        .map_err(|e| StartError::Failed(e.into()))?;
                    return Ok((handle, plan.keeps_workspace()));
                }
            }
        }
    }

    /// A new sandbox for the session, restored from `restore_from` if given.
    async fn create_sandbox(
        &mut self,
        name: &SandboxName,
        entry: &QueueEntry,
        restore_from: Option<&SnapshotRef>,
    ) -> Result<Handle, SandboxError> {
        let mut labels = sandbox::session_labels(self.id(), &self.rec.outpost_id);
        labels.insert(
            sandbox::LABEL_ACCEPTOR_ID.to_owned(),
            self.deps.acceptor_id.clone(),
        );
        let policy = entry.spec.network_policy.clone();
        let spec = SandboxSpec {
            name: name.clone(),
            labels,
            image: self.deps.outpost.image.clone(),
            restore_from: restore_from.cloned(),
            resources: self.deps.outpost.resources,
            network: sandbox::NetworkSpec {
                policy: policy.clone(),
                gateway_url: self.gateway_url(),
            },
        };
        // A restore from an object store can take longer than the claim
        // lasts: renew while it runs, as a snapshot does.
        let backend = self.deps.backend.clone();
        let handle = keep_claim_alive(
            self,
            async move { backend.create(&spec).await },
            SessionRunner::renewal_due_in,
            async |runner: &mut SessionRunner| runner.renew_in_step().await,
        )
        .await?;
        self.applied_policy = Some(policy);
        Ok(handle)
    }

    async fn find_sandbox(&self, name: &SandboxName) -> anyhow::Result<Option<Handle>> {
        if let Some(handle) = &self.rec.handle {
            return Ok(Some(handle.clone()));
        }
        Ok(self.deps.backend.find(name).await?)
    }

    /// The newest snapshot of the session that still exists, from the
    /// state store or, for a session another Garrison suspended, from the
    /// backend's shared store.
    async fn latest_snapshot(&self, name: &SandboxName) -> Option<SnapshotRef> {
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
        None
    }
}
