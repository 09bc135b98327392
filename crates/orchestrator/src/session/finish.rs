//! Winding a session down, as the runner records it: the stage first, the
//! remote stopped and its output copied, the sandbox ended (see
//! `wind_down.rs`), the record cleared, the snapshots dropped or kept, the
//! claim released.

use std::time::Duration;

use anyhow::anyhow;
use fleet::ReleaseOutcome;
use serde_json::json;
use tracing::{error, info, warn};

use super::SessionRunner;
use super::leftovers::{
    asked_if_over, destroy_unrecorded, find_unrecorded_sandbox, remove_remains,
};
use super::snapshots::{delete_snapshots, delete_snapshots_once};
use super::step::{KILL_GRACE, RecordFailed, StepError};
use super::wind_down::{end_sandbox, release};
use crate::metrics::Metrics;
use crate::planner::{
    AfterRelease, Finish, Stage, WindDownObs, after_release, finish_note, plan_wind_down,
};

impl SessionRunner {
    pub(super) async fn finish(&mut self, finish: Finish) -> Result<(), RecordFailed> {
        if self.rec.stage != Stage::Finishing(finish) {
            self.set_stage(Stage::Finishing(finish))?;
            // Said before the snapshot and the destroy, so whoever finds a
            // recovery snapshot and no final status finds why.
            if let Some(note) = finish_note(finish, &self.entry_obs) {
                warn!(
                    session_id = self.id(),
                    reason = note.reason(),
                    "the final status of the session cannot be read"
                );
                self.event(note.kind(), json!({ "reason": note.reason() }));
            }
            // Devin told a sleeping session's remote and it went by itself,
            // as the docs expect; else the kill after the grace said so.
            if finish == Finish::Suspended && !self.killed_remote {
                self.event("remote_exited_by_itself", json!({ "while": "suspended" }));
            }
            self.event("finishing", json!({ "finish": finish.to_string() }));
        }
        match self.wind_down(finish).await {
            Ok(()) => {}
            Err(StepError::Record(failed)) => return Err(failed),
            Err(StepError::Failed(e)) => {
                let message = format!("{e:#}");
                error!(session_id = self.id(), finish = %finish, error = %message, "finishing the session failed; retrying");
                self.event("finish_failed", json!({ "error": message }));
                self.pause(Duration::from_secs(2)).await;
                return Ok(());
            }
        }
        let done = match finish {
            Finish::Failed => {
                error!(
                    session_id = self.id(),
                    error = self.rec.error.as_deref().unwrap_or("unknown"),
                    "session failed; a recovery snapshot was kept where possible"
                );
                Finish::Failed
            }
            other => other,
        };
        Metrics::inc(&self.deps.metrics.sessions_finished);
        // The event before the stage: whoever sees the stage final (status
        // commands, `logs -f`, the dashboard) finds the whole history.
        self.event("done", json!({ "finish": done.to_string() }));
        self.set_stage(Stage::Done(done))?;
        info!(session_id = self.id(), finish = %done, "session done");
        Ok(())
    }

    pub(super) async fn wind_down(&mut self, finish: Finish) -> Result<(), StepError> {
        let ctx = self.ctx();
        let mut obs = WindDownObs {
            finish,
            ran_remote: self.rec.process.is_some(),
            suspend_keeps_memory: ctx.backend.capabilities().suspend_keeps_memory,
            suspend_failed: false,
            sandbox_gone: false,
        };
        if let Some(handle) = self.rec.handle.clone() {
            if let Some(process) = self.rec.process.clone() {
                ctx.backend
                    .kill(&handle, &process, KILL_GRACE)
                    .await
                    .map_err(|e| anyhow!(e))?;
                self.copy_output(&handle, &process).await;
            }
            obs = end_sandbox(&ctx, self, &handle, obs).await?;
            self.rec.handle = None;
            self.rec.process = None;
            self.save()?;
        } else {
            if (!obs.suspend_keeps_memory
                || matches!(finish, Finish::Terminated | Finish::Stopped { .. }))
                && let Some(unrecorded) =
                    find_unrecorded_sandbox(&ctx, &self.deps.acceptor_id).await
            {
                // Made but never recorded (the record failed, or Garrison
                // was killed between the two), so no remote ran in it.
                // Where a suspend keeps memory, the sandbox of an earlier
                // suspend is unrecorded too and kept until the session is
                // over.
                destroy_unrecorded(&ctx, &unrecorded).await;
            }
            // Begun but never finished (Garrison killed mid-create): the
            // next create of the name would clear it, but a session that
            // ends here has no next create.
            remove_remains(&ctx).await;
        }
        let plan = plan_wind_down(&obs);
        // A session this host lost may have ended elsewhere: asked once its
        // remote is stopped and its sandbox ended (a slow answer must not
        // keep a remote of a lost session alive), its snapshots go if the
        // fleet API says it is terminated.
        let over = finish == Finish::Vanished && asked_if_over(&ctx, &self.deps.client).await;
        // One pass before the release; what a store cut kept is tried
        // again after it, so the claim is not held through the retries.
        let mut left = (plan.delete_snapshots || over) && !delete_snapshots_once(&ctx).await;
        if plan.release {
            let outcome = self.release().await;
            let over = match after_release(finish, outcome, &self.entry_obs) {
                AfterRelease::Keep => false,
                AfterRelease::Ask => asked_if_over(&ctx, &self.deps.client).await,
                AfterRelease::Delete => true,
            };
            if over {
                left = !delete_snapshots_once(&ctx).await;
            }
        }
        if left {
            delete_snapshots(&ctx).await;
        }
        Ok(())
    }

    /// Gives the claim back (see [`release`]).
    pub(super) async fn release(&self) -> Option<ReleaseOutcome> {
        release(&self.ctx(), &self.deps.client, &self.deps.acceptor_id).await
    }
}
