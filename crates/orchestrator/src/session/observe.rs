//! Observing a session: its queue entry, the operator's requests, the
//! remote's status and output.

use fleet::QueueEntry;
use sandbox::{DesktopState, Handle, ProcessRef, ProcessStatus};
use serde_json::json;
use tracing::{debug, info, warn};

use super::{SessionRunner, local_now};
use crate::planner::{
    EntryObs, OperatorStop, RemoteObs, Stage, output_allowance, output_exhausted,
    track_applied_policy, track_suspended, track_suspended_confirmations,
};

/// Output copied per read.
const OUTPUT_CHUNK: usize = 256 * 1024;

impl SessionRunner {
    /// Takes in an operator's request (the first one counts).
    pub(super) fn observe_operator(
        &mut self,
        rx: &mut tokio::sync::watch::Receiver<Option<OperatorStop>>,
    ) {
        if self.operator_stop.is_some() {
            return;
        }
        let requested = *rx.borrow_and_update();
        if let Some(stop) = requested {
            info!(
                session_id = self.id(),
                keep_snapshot = stop.keep_snapshot,
                "the operator asked to terminate the session"
            );
            self.operator_stop = Some(stop);
            self.event(
                "operator_terminate",
                json!({ "keep_snapshot": stop.keep_snapshot, "stage": self.rec.stage.label() }),
            );
        }
    }

    pub(super) async fn observe(&mut self) {
        let now = local_now();
        match self.deps.view.get(&self.rec.session_id) {
            Some(entry) => {
                self.entry_obs = EntryObs::Present(entry.status.session_status.clone());
                self.note_entry(entry);
            }
            // Absent from a synced view: the entry may have left the queue.
            // Before the first list, absence means nothing yet.
            None if self.deps.view.is_synced()
                && (self.entry_obs != EntryObs::Unknown || self.rec.stage == Stage::Running) =>
            {
                self.confirm_absence().await;
            }
            None => {}
        }
        self.suspended_since = track_suspended(self.suspended_since, &self.entry_obs, now);
        self.suspended_confirmations =
            track_suspended_confirmations(self.suspended_confirmations, &self.entry_obs, false);

        if let (Some(handle), Some(process)) = (self.rec.handle.clone(), self.rec.process.clone()) {
            let status = match self.deps.backend.status(&handle, &process).await {
                Ok(ProcessStatus::Running) => RemoteObs::Running,
                Ok(ProcessStatus::Exited(code)) => RemoteObs::Exited(code),
                Ok(ProcessStatus::Lost) => RemoteObs::Lost,
                Err(e) if e.is_gone() => RemoteObs::Lost,
                Err(e) => {
                    warn!(session_id = self.id(), error = %e, "reading the remote's status failed");
                    self.remote
                }
            };
            let was_live = matches!(self.remote, RemoteObs::Running | RemoteObs::NotStarted);
            let is_live = matches!(status, RemoteObs::Running | RemoteObs::NotStarted);
            if was_live && !is_live {
                self.remote_stopped_at = Some(now);
                self.event("remote_exited", json!({ "status": status.to_string() }));
            }
            self.remote = status;
            if is_live {
                self.keep_desktop(&handle).await;
            }
            self.copy_output(&handle, &process).await;
        } else {
            self.remote = RemoteObs::NotStarted;
        }
    }

    /// Has the backend check the sandbox's desktop while the remote runs
    /// (the first look after a re-adoption included), and records a
    /// restart: the remote's screen went blank for a moment. A failed
    /// check is logged and tried again at the next look.
    async fn keep_desktop(&mut self, handle: &Handle) {
        match self.deps.backend.keep_desktop(handle).await {
            Ok(DesktopState::Restarted { reason }) => {
                warn!(
                    session_id = self.id(),
                    reason, "the desktop's X server was restarted"
                );
                self.event("desktop_restarted", json!({ "reason": reason }));
            }
            Ok(_) => {}
            Err(e) => {
                warn!(session_id = self.id(), error = %e, "checking the sandbox's desktop failed")
            }
        }
    }

    /// Takes in a reading of the entry (from the view, a claim or a get),
    /// and with it the network policy it asks for.
    pub(super) fn note_entry(&mut self, entry: QueueEntry) {
        self.claim.note_status(&entry.status.session_status);
        self.applied_policy = Some(track_applied_policy(
            self.applied_policy.as_ref(),
            &entry.spec.network_policy,
            self.rec.handle.is_some(),
        ));
        self.entry = Some(entry);
    }

    /// Gives the sandbox the policy the entry asks for now. A failure is
    /// logged and not retried until the policy changes again, as a
    /// backend that cannot update a policy would fail every retry.
    pub(super) async fn update_network_policy(&mut self) {
        let Some(policy) = self.entry.as_ref().map(|e| e.spec.network_policy.clone()) else {
            return;
        };
        if let Some(handle) = self.rec.handle.clone() {
            match self
                .deps
                .backend
                .update_network_policy(&handle, &policy)
                .await
            {
                Ok(()) => self.event(
                    "network_policy_updated",
                    json!({ "enabled": policy.enabled, "rules": policy.allow.len() }),
                ),
                Err(e) => {
                    warn!(session_id = self.id(), error = %e, "applying the changed network policy failed")
                }
            }
        }
        self.applied_policy = Some(policy);
    }

    /// Copies what the remote wrote since the recorded offset into the
    /// session log. Progress, not a step: when the log cannot be written
    /// (a full disk) the output stays in the sandbox and is copied at a
    /// later look; an offset that cannot be recorded is kept in memory and
    /// written with the next record (after a crash, at worst some output
    /// is copied twice).
    pub(super) async fn copy_output(&mut self, handle: &Handle, process: &ProcessRef) {
        let cap = self.deps.policy.session_log_max_bytes;
        loop {
            let copied = self.deps.logs.remote_output_len(self.id());
            if output_exhausted(copied, cap) {
                return;
            }
            let chunk = match self
                .deps
                .backend
                .read_output(handle, process, self.rec.output_offset, OUTPUT_CHUNK)
                .await
            {
                Ok(chunk) => chunk,
                Err(_) => return,
            };
            if chunk.data.is_empty() {
                return;
            }
            let allowed = output_allowance(copied, cap, chunk.data.len());
            if let Err(e) = self
                .deps
                .logs
                .remote_output(self.id(), &chunk.data[..allowed.take])
            {
                // Once per stall, not at every look while the disk is full.
                if !self.output_stalled {
                    warn!(session_id = self.id(), error = %e, "writing the session log failed; the output stays in the sandbox and is copied once the log can be written");
                    self.output_stalled = true;
                }
                return;
            }
            if std::mem::take(&mut self.output_stalled) {
                info!(session_id = self.id(), "the session log is written again");
            }
            if allowed.cap_reached {
                self.note_output_capped(cap);
            }
            self.rec.output_offset = chunk.next_offset;
            if let Err(failed) = self.save() {
                debug!(session_id = self.id(), error = %failed, "recording the output offset failed; it is kept for the next record");
            }
        }
    }

    /// Says, in the log a reader sees and in the events, that the rest of
    /// the output stays in the sandbox.
    fn note_output_capped(&self, cap: u64) {
        let notice = format!(
            "\n[garrison] this log reached its cap of {} MiB (session_log_max_mb); \
             the remote's further output is not copied\n",
            cap >> 20
        );
        if let Err(e) = self.deps.logs.remote_output(self.id(), notice.as_bytes()) {
            warn!(session_id = self.id(), error = %e, "writing the session log failed");
        }
        warn!(
            session_id = self.id(),
            cap_bytes = cap,
            "the session log reached its cap; further output is not copied"
        );
        self.event("output_capped", json!({ "cap_bytes": cap }));
    }

    /// Asks the fleet API about an entry the view no longer has before
    /// counting it gone: a view can miss an entry (a re-list that raced
    /// its update, a dropped event), and `Gone` winds a running session
    /// down as vanished, for another acceptor to claim. Asked once per
    /// disappearance; an unanswered question leaves the reading as it was.
    async fn confirm_absence(&mut self) {
        if self.entry_obs == EntryObs::Gone {
            return;
        }
        match self.deps.client.get(&self.rec.session_id).await {
            Ok(Some(entry)) => {
                debug!(
                    session_id = self.id(),
                    "the queue view missed an entry the fleet API still has"
                );
                self.entry_obs = EntryObs::Present(entry.status.session_status.clone());
                self.deps.view.upsert(entry.clone());
                self.note_entry(entry);
            }
            Ok(None) => self.entry_obs = EntryObs::Gone,
            Err(e) => {
                warn!(session_id = self.id(), error = %e, "reading an entry the queue view no longer has failed");
            }
        }
    }

    pub(super) async fn confirm_end(&mut self) {
        self.confirm_attempts += 1;
        self.last_confirm_at = Some(local_now());
        match self.deps.client.get(&self.rec.session_id).await {
            Ok(Some(entry)) => {
                self.entry_obs = EntryObs::Present(entry.status.session_status.clone());
                self.deps.view.upsert(entry.clone());
                self.note_entry(entry);
            }
            Ok(None) => self.entry_obs = EntryObs::Gone,
            Err(e) => {
                warn!(session_id = self.id(), error = %e, "reading the final status failed");
                return;
            }
        }
        self.suspended_confirmations =
            track_suspended_confirmations(self.suspended_confirmations, &self.entry_obs, true);
    }
}
