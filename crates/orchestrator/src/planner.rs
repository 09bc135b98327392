//! The pure planner: what to do next, decided from observed state alone.
//!
//! Nothing here performs I/O or reads a clock; `now` is passed in. The
//! decisions:
//!
//! - [`plan_claims`]: which queue entries to claim or adopt, given capacity;
//!   [`cooldown_until`]: how long a session whose runner ended here is left
//!   to others.
//! - [`plan_session`]: the next step for one session this orchestrator
//!   holds, from its recorded stage, the remote's status, the entry's
//!   `session_status` and network policy.
//! - [`plan_start`]: within a start, which sandbox to use (the one kept
//!   suspended, one restored from a snapshot, a fresh one), from what the
//!   start has found and what failed so far.
//! - [`look_again_in`]: how soon a runner with nothing to do looks again.
//! - [`assess_room`]: whether the state directory has room to take on new
//!   sessions; [`plan_unrecorded`]: what a session whose record cannot be
//!   written for want of space may still do.
//! - [`plan_wind_down`]: what winding a session down keeps, drops and gives
//!   back; [`finish_on_claim_lost`]: how a session whose claim another
//!   acceptor took is wound down; [`finish_note`]: what the session's
//!   events say as a wind-down begins (a final status never read).
//!
//! The executor performs the step, records the outcome, observes again and
//! asks again; every step is idempotent, so asking again after a crash
//! finishes a half-done step instead of repeating it. Where a step can fail
//! in a way that changes the plan (a snapshot gone at restore), the
//! executor reports the outcome and asks again rather than choosing itself.

use fleet::{NetworkPolicy, SessionStatus};

mod cadence;
mod claims;
mod output;
mod renewal;
mod room;
mod stage;
mod start;
mod terms;
mod wind_down;

pub(crate) use cadence::{LookObs, look_again_in};
pub(crate) use claims::{
    ClaimAction, ClaimObs, RunnerEnd, claim_retry_delay, cooldown_until, plan_claims,
};
pub(crate) use output::{DEFAULT_SESSION_LOG_MAX_BYTES, output_allowance, output_exhausted};
pub use renewal::renew_margin;
#[cfg(test)]
pub(crate) use renewal::{ASSUMED_CLAIM_LIFETIME_MS, MIN_RENEW_INTERVAL_MS};
pub(crate) use renewal::{
    ClaimAnswer, LifetimeSource, Renewal, claim_lifetime, give_up_ahead, lapsed_claim_is_lost,
    renewal_due_in, step_budget,
};
pub(crate) use room::{
    DEFAULT_MIN_FREE_BYTES, Room, RoomChange, RoomObs, Shortage, assess_room, probe_store,
    room_change,
};
pub use stage::{Finish, Stage, StageLabel};
pub(crate) use start::{FreshReason, SnapshotObs, StartFailure, StartObs, StartPlan, plan_start};
pub(crate) use terms::{DEFAULT_SUSPEND_EXIT_GRACE_MS, EntryObs, OperatorStop, RemoteObs};
pub use terms::{Millis, Policy};
pub use wind_down::SnapshotReason;
pub(crate) use wind_down::{
    AfterRelease, FinishNote, SandboxEnd, WindDownObs, after_release, asks_again, finish_note,
    lost_session_note, plan_wind_down,
};

/// Everything [`plan_session`] looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionObs {
    /// The time of the observation.
    pub now: Millis,
    /// The recorded stage.
    pub stage: Stage,
    /// When the claim expires, on `now`'s clock: the arrival of the last
    /// claim answer plus the lifetime it implied (see [`claim_lifetime`]),
    /// never the server's deadline compared with our clock.
    pub claim_deadline: Option<Millis>,
    /// How long the last claim or renewal was granted for; renewal starts at
    /// half of it when that is sooner than the policy's margin, so short
    /// claims are renewed in time without renewing on every look.
    pub claim_lifetime_ms: Option<Millis>,
    /// When the last renewal was attempted (renewals are paced by
    /// [`MIN_RENEW_INTERVAL_MS`]).
    pub last_renewal_at: Option<Millis>,
    /// The connect token from the claim is in memory (it is never stored, so
    /// after a restart the claim must be renewed to get a fresh one).
    pub has_connect_token: bool,
    /// What the queue says.
    pub entry: EntryObs,
    /// The remote's state.
    pub remote: RemoteObs,
    /// When the current remote was seen to have stopped.
    pub remote_stopped_at: Option<Millis>,
    /// Since when `suspended` has been read continuously while the remote
    /// ran (see [`track_suspended`]).
    pub suspended_since: Option<Millis>,
    /// Reads in a row, each taken by a confirming read after the remote
    /// stopped, that said `suspended` (see [`track_suspended_confirmations`]).
    pub suspended_confirmations: u32,
    /// Restarts so far.
    pub restarts: u32,
    /// Failed starts so far.
    pub start_failures: u32,
    /// Tries to confirm the end so far.
    pub confirm_attempts: u32,
    /// The last try to confirm the end.
    pub last_confirm_at: Option<Millis>,
    /// The orchestrator is shutting down and must not start new sandboxes.
    pub stopping: bool,
    /// The operator asked to terminate the session.
    pub operator_stop: Option<OperatorStop>,
    /// A sandbox is recorded for the session.
    pub has_sandbox: bool,
    /// The network policy the entry asks for now (`None` before the entry
    /// was seen).
    pub network_policy: Option<NetworkPolicy>,
    /// The policy the sandbox is taken to have (see [`track_applied_policy`]).
    pub applied_policy: Option<NetworkPolicy>,
}

/// The next step for one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SessionAction {
    /// Nothing to do until something changes.
    Wait,
    /// Claim again with the same acceptor id: a later deadline and a fresh
    /// connect token.
    Renew,
    /// Create the sandbox (restored from a snapshot when there is one), put
    /// the remote in and start it.
    Start,
    /// Start the remote again in the existing sandbox.
    RestartRemote,
    /// Stop the running remote: the session is over or asleep.
    KillRemote,
    /// Re-read the entry to learn the final `session_status`.
    ConfirmEnd,
    /// Wind the session down this way.
    Finish(Finish),
    /// Give the sandbox the entry's changed network policy.
    UpdateNetworkPolicy,
}

/// Decides the next step for a held session.
pub(crate) fn plan_session(obs: &SessionObs, policy: &Policy) -> SessionAction {
    use SessionAction as A;
    // A sandbox must not keep reaching what the entry no longer allows, in
    // whatever stage, so this comes before every other step.
    if !obs.stage.is_done() && policy_is_stale(obs) {
        return A::UpdateNetworkPolicy;
    }
    match obs.stage {
        Stage::Done(_) => A::Wait,
        // A wind-down under way is completed as begun, whatever was asked
        // since (the snapshot it takes or keeps is already decided).
        Stage::Finishing(finish) => A::Finish(finish),
        Stage::Claimed | Stage::Starting | Stage::Running if obs.operator_stop.is_some() => {
            plan_operator_stop(obs)
        }
        Stage::Claimed | Stage::Starting => plan_before_running(obs, policy),
        Stage::Running => plan_running(obs, policy),
    }
}

/// What a held session may do while its last record is unwritten for want
/// of space (the runner waits for room rather than stop): keep its claim,
/// renewed when due, and nothing else, since every other step is recorded
/// before it runs. A session winding down keeps its claim too: a suspended
/// session's snapshot is not taken yet, and another acceptor taking it
/// meanwhile would resume an older one.
pub(crate) fn plan_unrecorded(obs: &SessionObs, policy: &Policy) -> SessionAction {
    if obs.stage.is_done() {
        return SessionAction::Wait;
    }
    renewal_step(obs, policy).unwrap_or(SessionAction::Wait)
}

/// The operator's word wins over the entry's status, renewals and restarts:
/// stop a running remote, then wind down.
fn plan_operator_stop(obs: &SessionObs) -> SessionAction {
    let Some(OperatorStop { keep_snapshot }) = obs.operator_stop else {
        return SessionAction::Wait;
    };
    if obs.remote == RemoteObs::Running {
        SessionAction::KillRemote
    } else {
        SessionAction::Finish(Finish::Stopped { keep_snapshot })
    }
}

fn plan_before_running(obs: &SessionObs, policy: &Policy) -> SessionAction {
    use SessionAction as A;
    match &obs.entry {
        // Ended before it started here: nothing to keep.
        EntryObs::Present(SessionStatus::Terminated) => return A::Finish(Finish::Terminated),
        EntryObs::Gone => return A::Finish(Finish::Released),
        // A claim on a sleeping session's row (a released row lingers as
        // `pending` until the server sweeps it): starting would restore a
        // workspace its last holder may still be saving, and a resume
        // comes as a row of its own. Nothing has started: give it back.
        EntryObs::Present(SessionStatus::Suspended) if obs.stage == Stage::Claimed => {
            return A::Finish(Finish::Released);
        }
        _ => {}
    }
    if obs.stopping && obs.stage == Stage::Claimed {
        return A::Finish(Finish::Released);
    }
    if obs.start_failures >= policy.max_start_failures {
        return A::Finish(Finish::Released);
    }
    renewal_step(obs, policy).unwrap_or(A::Start)
}

fn plan_running(obs: &SessionObs, policy: &Policy) -> SessionAction {
    use SessionAction as A;
    let remote_running = obs.remote == RemoteObs::Running;
    match &obs.entry {
        EntryObs::Gone if remote_running => return A::KillRemote,
        EntryObs::Gone => return A::Finish(Finish::Vanished),
        EntryObs::Present(SessionStatus::Terminated) if remote_running => return A::KillRemote,
        EntryObs::Present(SessionStatus::Terminated) => return A::Finish(Finish::Terminated),
        _ => {}
    }
    let suspended = obs.entry == EntryObs::Present(SessionStatus::Suspended);
    match obs.remote {
        RemoteObs::Running => {
            let persisted = obs
                .suspended_since
                .is_some_and(|since| obs.now - since >= policy.suspend_exit_grace_ms);
            if suspended && persisted {
                A::KillRemote
            } else {
                renewal_step(obs, policy).unwrap_or(A::Wait)
            }
        }
        // After the remote stopped, `suspended` is believed once it has
        // lasted as long as it must while the remote runs, or once reads
        // after the stop confirm it; until then it is read again. A reading
        // taken while the remote still ran, or one passing read during the
        // seconds the final status lags the exit, is the brief `suspended`
        // a live session shows: winding down on it would give a running
        // session back to the queue, for a second remote to serve.
        _ if suspended && suspend_confirmed(obs, policy) => A::Finish(Finish::Suspended),
        _ if suspended => plan_confirm(obs, policy),
        RemoteObs::Exited(0) => plan_confirm(obs, policy),
        RemoteObs::NotStarted => renewal_step(obs, policy).unwrap_or(A::RestartRemote),
        RemoteObs::Exited(_) | RemoteObs::Lost => {
            if obs.restarts >= policy.max_restarts {
                return A::Finish(Finish::Failed);
            }
            if let Some(step) = renewal_step(obs, policy) {
                return step;
            }
            let stopped_at = obs.remote_stopped_at.unwrap_or(obs.now);
            if obs.now - stopped_at >= policy.restart_delay_ms(obs.restarts) {
                A::RestartRemote
            } else {
                A::Wait
            }
        }
    }
}

/// A clean exit: the status lags, so re-read it a bounded number of times.
fn plan_confirm(obs: &SessionObs, policy: &Policy) -> SessionAction {
    use SessionAction as A;
    if obs.confirm_attempts >= policy.confirm_attempts {
        return A::Finish(Finish::Failed);
    }
    if let Some(step) = renewal_step(obs, policy) {
        return step;
    }
    let due = obs
        .last_confirm_at
        .is_none_or(|at| obs.now - at >= policy.confirm_interval_ms);
    if due { A::ConfirmEnd } else { A::Wait }
}

/// A `suspended` reading, after the remote stopped, is the session's own:
/// it has lasted the grace a running remote gets, or that many confirming
/// reads in a row found it.
fn suspend_confirmed(obs: &SessionObs, policy: &Policy) -> bool {
    let lasted = obs
        .suspended_since
        .is_some_and(|since| obs.now - since >= policy.suspend_exit_grace_ms);
    lasted || obs.suspended_confirmations >= policy.suspend_confirmations
}

/// `Renew` when the claim is due, `Wait` when due but a renewal was just
/// tried (what needs the claim waits for it rather than going on without),
/// `None` when the claim is good.
fn renewal_step(obs: &SessionObs, policy: &Policy) -> Option<SessionAction> {
    match renewal::renewal(
        obs.now,
        obs.claim_deadline,
        obs.claim_lifetime_ms,
        obs.has_connect_token,
        obs.last_renewal_at,
        policy,
    ) {
        Renewal::NotDue => None,
        Renewal::Due => Some(SessionAction::Renew),
        Renewal::Paced => Some(SessionAction::Wait),
    }
}

/// The sandbox has a policy other than the one the entry asks for.
fn policy_is_stale(obs: &SessionObs) -> bool {
    obs.has_sandbox
        && matches!(
            (&obs.applied_policy, &obs.network_policy),
            (Some(applied), Some(wanted)) if applied != wanted
        )
}

/// Updates the policy a session's sandbox is taken to have from a new
/// reading of the entry's policy. The first reading is what the sandbox was
/// made with; while there is no sandbox the reading is followed, since a
/// sandbox created later gets the entry's newest policy. Once a sandbox
/// exists, only an update ([`SessionAction::UpdateNetworkPolicy`]) changes it.
pub(crate) fn track_applied_policy(
    applied: Option<&NetworkPolicy>,
    observed: &NetworkPolicy,
    has_sandbox: bool,
) -> NetworkPolicy {
    match applied {
        Some(applied) if has_sandbox => applied.clone(),
        _ => observed.clone(),
    }
}

/// How a session whose claim another acceptor took is wound down. Once our
/// remote was started, its work is kept and nothing given back (our remote
/// must not run beside theirs). Before that, the sandbox holds nothing the
/// snapshot it came from lacks: it is destroyed without a snapshot, which
/// would otherwise be the newest of the session and could shadow the one
/// the new holder takes when it suspends.
pub(crate) fn finish_on_claim_lost(stage: Stage) -> Finish {
    match stage {
        Stage::Claimed | Stage::Starting => Finish::Released,
        _ if stage.may_have_sandbox() => Finish::Vanished,
        _ => Finish::Released,
    }
}

/// Updates "suspended since" from a new reading: set on the first
/// `suspended`, kept while it stays, cleared by anything else.
pub(crate) fn track_suspended(
    since: Option<Millis>,
    entry: &EntryObs,
    now: Millis,
) -> Option<Millis> {
    match entry {
        EntryObs::Present(SessionStatus::Suspended) => Some(since.unwrap_or(now)),
        _ => None,
    }
}

/// Updates the count of reads in a row that said `suspended` from a new
/// reading: a confirming read (the entry read again after the remote
/// stopped) adds one, a reading of the queue view leaves the count as it is
/// when it too says `suspended`, and anything else starts it over.
pub(crate) fn track_suspended_confirmations(count: u32, entry: &EntryObs, confirming: bool) -> u32 {
    match entry {
        EntryObs::Present(SessionStatus::Suspended) if confirming => count.saturating_add(1),
        EntryObs::Present(SessionStatus::Suspended) => count,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
