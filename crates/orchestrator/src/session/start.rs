//! The start step as the runner records it: the sandbox brought up (see
//! `starting.rs`), the remote started (see `run.rs`), each outcome written
//! down before the next step, and a failed start's outcome (refused, given
//! up, failed, retried) recorded.

use std::time::Duration;

use anyhow::Context;
use fleet::QueueEntry;
use serde_json::json;
use tracing::{error, warn};

use super::SessionRunner;
use super::provision::{ProvisionInput, Provisioned};
use super::starting::{StartInput, StartRecords, prepare};
use super::step::{KeepClaim, RecordFailed, StartError};
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

    /// Starts the session: the sandbox brought up (see [`prepare`]), then
    /// the remote launched (see [`Self::spawn_remote`]), each outcome
    /// recorded before the next step.
    pub(super) async fn try_start(&mut self) -> Result<(), StartError> {
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        let entry = self.current_entry().await.map_err(StartError::Failed)?;
        let deps = self.deps.clone();
        let input = StartInput {
            entry: &entry,
            resolver: &deps.resolver,
            repos: &deps.outpost.repos,
            mirrors: &deps.mirrors,
            provision: ProvisionInput {
                entry: &entry,
                kind: self.rec.kind.clone(),
                recorded: self.rec.handle.clone(),
                remote_recorded: self.rec.process.is_some(),
                outpost_id: &self.rec.outpost_id.clone(),
                acceptor_id: &deps.acceptor_id,
                image: deps.outpost.image.clone(),
                resources: deps.outpost.resources,
                corrupt_snapshot_starts_fresh: deps.policy.corrupt_snapshot_starts_fresh,
            },
        };
        let ready = prepare(&self.ctx(), self, input).await?;
        if let Some(workdir) = ready.cloned_into {
            self.remote_cwd = Some(workdir);
        }
        if !self.has_budget() {
            return Err(StartError::Deadline);
        }
        Ok(self.spawn_remote().await?)
    }
}

impl StartRecords for SessionRunner {
    fn resolved(&mut self, remote_sha: &str) {
        self.rec.remote_sha = Some(remote_sha.to_owned());
    }

    fn starting(&mut self) -> Result<(), RecordFailed> {
        if self.rec.stage == Stage::Claimed {
            self.set_stage(Stage::Starting)?;
            self.event(
                "starting",
                json!({ "remote_sha": self.rec.remote_sha, "backend": self.deps.backend.kind() }),
            );
        }
        Ok(())
    }

    fn sandbox_made(&mut self, provisioned: &Provisioned) -> Result<(), RecordFailed> {
        if let Some(policy) = &provisioned.applied_policy {
            self.applied_policy = Some(policy.clone());
        }
        let handle = provisioned.handle.clone();
        self.rec.handle = Some(handle.clone());
        self.save()?;
        self.event("sandbox_created", json!({ "sandbox": handle.name }));
        Ok(())
    }
}
