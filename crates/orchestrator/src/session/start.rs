//! The start step as the runner records it: the binary resolved, a sandbox
//! for the session (see `provision.rs`), the remote binary in it, the
//! repositories cloned (see `clone_repos.rs`), the remote started (see
//! `run.rs`), each outcome written down before the next step.

use std::time::Duration;

use anyhow::Context;
use fleet::QueueEntry;
use serde_json::json;
use tracing::{error, warn};

use super::SessionRunner;
use super::clone_repos::clone_repos;
use super::provision::{ProvisionInput, provision};
use super::step::{KeepClaim, RecordFailed, StartError};
use crate::contract;
use crate::metrics::Metrics;
use crate::planner::{Finish, Stage};
use crate::store::Unrestorable;
use common::now_ms;

impl SessionRunner {
    /// The entry as claimed (for its pinned SHA and network policy).
    pub(super) async fn current_entry(&mut self) -> anyhow::Result<QueueEntry> {
        if let Some(entry) = &self.entry {
            return Ok(entry.clone());
        }
        let entry = self
            .deps
            .client
            .get(&self.rec.session_id)
            .await?
            .context("the entry is gone")?;
        self.note_entry(entry.clone());
        Ok(entry)
    }

    pub(super) async fn start(&mut self) -> Result<(), RecordFailed> {
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
                self.set_stage(Stage::Finishing(Finish::Released))?;
            }
            Err(StartError::Corrupt(reason)) => {
                error!(
                    session_id = self.id(),
                    reason, "refusing to restore the session's snapshot; the session fails"
                );
                self.rec.error = Some(reason);
                self.set_stage(Stage::Finishing(Finish::Failed))?;
            }
            Err(StartError::Unrestorable {
                snapshot_id,
                reason,
            }) => {
                let reason = self.deps.logs.redactor().scrub(&reason);
                error!(
                    session_id = self.id(),
                    snapshot = snapshot_id,
                    reason,
                    "the session's snapshot cannot be restored here; giving the session up \
                     (the snapshot is kept; this Garrison will not claim it again)"
                );
                // Marked before the release, so no later round claims it.
                self.deps
                    .store
                    .mark_unrestorable(&Unrestorable {
                        session_id: self.rec.session_id.clone(),
                        snapshot_id: snapshot_id.clone(),
                        reason: reason.clone(),
                        at: now_ms(),
                    })
                    .map_err(RecordFailed)?;
                self.rec.error = Some(format!(
                    "snapshot {snapshot_id} cannot be restored here (kept; this Garrison will \
                     not claim the session again): {reason}"
                ));
                self.event(
                    "start_given_up",
                    json!({ "reason": reason, "snapshot": snapshot_id, "unrestorable": true }),
                );
                self.set_stage(Stage::Finishing(Finish::Released))?;
            }
            Err(StartError::Deadline) => {
                // The planner renews next; nothing failed.
            }
            Err(StartError::Record(failed)) => return Err(failed),
            Err(StartError::Failed(e)) => {
                self.rec.start_failures += 1;
                let message = sandbox::bounded_output::clip_error(
                    &self.deps.logs.redactor().scrub(&format!("{e:#}")),
                );
                warn!(session_id = self.id(), attempt = self.rec.start_failures, error = %message, "starting the session failed");
                self.rec.error = Some(message.clone());
                self.event(
                    "start_failed",
                    json!({ "error": message, "attempt": self.rec.start_failures }),
                );
                self.save()?;
                self.pause(Duration::from_secs(1)).await;
            }
        }
        Ok(())
    }

    pub(super) async fn try_start(&mut self) -> Result<(), StartError> {
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        let entry = self.current_entry().await.map_err(StartError::Failed)?;
        let pinned = entry.spec.remote_binary_sha.clone();
        let remote = match self
            .deps
            .resolver
            .resolve(pinned.as_deref(), self.deps.backend.capabilities().arch)
            .await
        {
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
            self.set_stage(Stage::Starting)
                .map_err(StartError::Record)?;
            self.event(
                "starting",
                json!({ "remote_sha": remote.sha, "backend": self.deps.backend.kind() }),
            );
        }
        let ctx = self.ctx();
        let input = ProvisionInput {
            entry: &entry,
            kind: self.rec.kind.clone(),
            recorded: self.rec.handle.clone(),
            remote_recorded: self.rec.process.is_some(),
            outpost_id: &self.rec.outpost_id.clone(),
            acceptor_id: &self.deps.acceptor_id.clone(),
            image: self.deps.outpost.image.clone(),
            resources: self.deps.outpost.resources,
            corrupt_snapshot_starts_fresh: self.deps.policy.corrupt_snapshot_starts_fresh,
        };
        let provisioned = provision(&ctx, self, input).await?;
        if let Some(policy) = provisioned.applied_policy {
            self.applied_policy = Some(policy);
        }
        let (handle, restored) = (provisioned.handle, provisioned.keeps_workspace);
        self.rec.handle = Some(handle.clone());
        self.save().map_err(StartError::Record)?;
        self.event("sandbox_created", json!({ "sandbox": handle.name }));
        self.check_renewals().map_err(StartError::Record)?;
        // A renewal while the sandbox was made found the claim lost: the
        // planner winds the session down (the sandbox is recorded).
        if self.claim_lost() {
            return Err(StartError::Deadline);
        }

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
        // Named by its verified digest, so a backend that can share one
        // stored copy among its sandboxes (the host backend links it) does
        // not write the binary once per session.
        self.deps
            .backend
            .put_executable(&handle, &path, &bytes, &remote.sha256)
            .await
            .map_err(|e| StartError::Failed(e.into()))?;
        // A restored or resumed workspace has its repositories already.
        if !restored {
            let repos = self.deps.outpost.repos.clone();
            clone_repos(&ctx, self, &handle, &repos).await?;
            self.remote_cwd = Some(handle.workdir.clone());
        }
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        Ok(self.spawn_remote().await?)
    }
}
