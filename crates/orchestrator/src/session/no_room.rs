//! A runner whose record could not be written for want of space: it waits
//! for room rather than stop, so a full state directory does not cost a
//! running session its claim.
//!
//! The record it failed to write stays in memory, ahead of the store; it
//! describes what happened or what is about to (a sandbox made, a stage
//! entered), never a step that ran unrecorded, since the step it was to
//! precede did not run. Until that record is written, the runner only
//! looks (the remote's status, its output when the log can take it) and
//! keeps the claim ([`plan_unrecorded`]); then it goes on from the record
//! as a Garrison restarted at that point would.

use std::time::Duration;

use tracing::{info, warn};

use super::step::RecordFailed;
use super::{SessionRunner, local_now};
use crate::planner::{SessionAction, plan_unrecorded};
use crate::store::is_out_of_space;

/// How often the record is tried again while the disk is full.
const RECORD_RETRY: Duration = Duration::from_secs(2);

impl SessionRunner {
    /// Waits until the record that `failed` is written, for a session past
    /// `claimed` whose write failed for want of space; `Err` (the runner
    /// stops, see [`SessionRunner::run`]) for any other failure, or when
    /// Garrison stops meanwhile without draining.
    pub(super) async fn wait_for_room(&mut self, failed: RecordFailed) -> Result<(), RecordFailed> {
        if !is_out_of_space(&failed.0) || self.never_started() {
            return Err(failed);
        }
        warn!(
            session_id = self.id(),
            error = %failed,
            "no room in the state directory for this session's record; the session keeps \
             running as it is, its claim renewed, and its next step waits until the record \
             can be written"
        );
        loop {
            if self.deps.stopping.is_cancelled() && !self.deps.drain {
                return Err(failed);
            }
            self.pause(RECORD_RETRY).await;
            self.observe().await;
            if plan_unrecorded(&self.observation(local_now()), &self.deps.policy)
                == SessionAction::Renew
            {
                // A record the renewal fails to write (a claim lost, now
                // finishing) is in memory too, and written below.
                let _ = self.renew().await;
            }
            match self.save() {
                Ok(()) => {
                    info!(
                        session_id = self.id(),
                        stage = %self.rec.stage,
                        "the session's record is written again; it goes on"
                    );
                    return Ok(());
                }
                Err(again) if is_out_of_space(&again.0) => {}
                Err(other) => return Err(other),
            }
        }
    }
}
