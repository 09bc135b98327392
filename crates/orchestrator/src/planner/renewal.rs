//! How long a claim lasts and when to renew it.
//!
//! A claim answer's deadline is read RELATIVE to the answer: the lifetime
//! it implies (deadline minus the server's own clock, where the answer
//! carries one) is added to the moment the answer arrived, on this
//! process's monotonic clock. So a server clock minutes off ours neither
//! makes every claim look expired (a renewal storm) nor longer than it is.
//! An answer without a readable deadline keeps the lifetime learned before,
//! else [`ASSUMED_CLAIM_LIFETIME_MS`]; renewals are never closer together
//! than [`MIN_RENEW_INTERVAL_MS`], so no answer can make Garrison re-claim
//! in a loop.

use super::terms::{Millis, Policy};

/// The claim lifetime taken when an answer says nothing usable (observed:
/// about 5 minutes). Also the longest lifetime believed: a longer one can
/// only come from a skewed or stale clock, and renewing early is harmless.
pub(crate) const ASSUMED_CLAIM_LIFETIME_MS: Millis = 300_000;

/// Renewals (successful or not) are at least this far apart.
pub(crate) const MIN_RENEW_INTERVAL_MS: Millis = 2_000;

/// A slow step is not begun with less claim time left than this, or than
/// the renewal margin of a shorter claim (else a short claim could never
/// start anything).
pub(super) const MIN_STEP_BUDGET_MS: Millis = 10_000;

/// What a claim answer says about its lifetime (Unix ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClaimAnswer {
    /// `status.claim_deadline`, when present and readable.
    pub deadline: Option<Millis>,
    /// The server's clock at the answer: the entry's `updated_at`, which a
    /// claim sets.
    pub server_now: Option<Millis>,
    /// Garrison's clock when the answer arrived.
    pub local_now: Millis,
}

/// Where a lifetime came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LifetimeSource {
    /// Deadline minus the server's clock: immune to clock skew.
    ServerClock,
    /// Deadline minus our clock (no server clock in the answer).
    LocalClock,
    /// No readable deadline: the lifetime an earlier answer implied.
    Previous,
    /// No readable deadline and nothing learned: [`ASSUMED_CLAIM_LIFETIME_MS`].
    Assumed,
}

/// The lifetime a claim answer grants, counted from its arrival.
/// `previous`: the lifetime an earlier answer's deadline implied.
pub(crate) fn claim_lifetime(
    answer: &ClaimAnswer,
    previous: Option<Millis>,
) -> (Millis, LifetimeSource) {
    let implied = |now: Millis| {
        answer
            .deadline
            .map(|d| d - now)
            .filter(|lifetime| *lifetime > 0)
    };
    if let Some(lifetime) = answer.server_now.and_then(implied) {
        return (
            lifetime.min(ASSUMED_CLAIM_LIFETIME_MS),
            LifetimeSource::ServerClock,
        );
    }
    if let Some(lifetime) = implied(answer.local_now) {
        return (
            lifetime.min(ASSUMED_CLAIM_LIFETIME_MS),
            LifetimeSource::LocalClock,
        );
    }
    match previous {
        Some(lifetime) if lifetime > 0 => (lifetime, LifetimeSource::Previous),
        _ => (ASSUMED_CLAIM_LIFETIME_MS, LifetimeSource::Assumed),
    }
}

/// How close to its expiry a claim is renewed: the policy's margin, or half
/// of a shorter claim (renewed in time without renewing on every look).
pub fn renew_margin(lifetime: Option<Millis>, policy: &Policy) -> Millis {
    match lifetime {
        Some(lifetime) if lifetime > 0 => policy.renew_margin_ms.min(lifetime / 2),
        _ => policy.renew_margin_ms,
    }
}

/// The claim time a slow step needs left to begin. Never more than the
/// renewal margin: a claim just renewed always has room for a step.
pub(crate) fn step_budget(lifetime: Option<Millis>, policy: &Policy) -> Millis {
    MIN_STEP_BUDGET_MS.min(renew_margin(lifetime, policy))
}

/// How long before its reckoned expiry an unrenewed claim of a session
/// not seen running is given up: the expiry is reckoned from the answer's
/// arrival, so it falls after the server's deadline by the answer's
/// latency, and by up to a second more where the server's timestamps are
/// whole seconds. Given up before the server frees the claim, our remote
/// is stopped before another acceptor's claim can let it dial in.
pub(crate) const GIVE_UP_AHEAD_MS: Millis = 2_000;

/// [`GIVE_UP_AHEAD_MS`], or a fifth of a shorter claim.
pub(crate) fn give_up_ahead(lifetime: Option<Millis>) -> Millis {
    match lifetime {
        Some(lifetime) if lifetime > 0 => GIVE_UP_AHEAD_MS.min(lifetime / 5),
        _ => GIVE_UP_AHEAD_MS,
    }
}

/// Whether a claim that could not be renewed must be given up as lost:
/// its expiry (reckoned from the last answer's arrival, so never before the
/// server's) is at most [`give_up_ahead`] away, and the fleet API was never
/// seen to have the session `running` under it. An expired claim on a
/// running session stays with its worker (the fleet API refuses it to
/// anyone else), so that remote may go on; any other session returns to
/// the queue at its deadline, another acceptor may claim it and start a
/// remote of its own, and ours, still trying to dial in (say, from behind a
/// network cut), must be stopped before it can: connect tokens stay valid
/// for the whole session, so the gateway would let it in.
pub(crate) fn lapsed_claim_is_lost(
    time_left: Option<Millis>,
    lifetime: Option<Millis>,
    seen_running: bool,
) -> bool {
    !seen_running && time_left.is_some_and(|left| left <= give_up_ahead(lifetime))
}

/// Whether to renew now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Not yet.
    NotDue,
    /// Renew now.
    Due,
    /// Due, but the last attempt was less than [`MIN_RENEW_INTERVAL_MS`]
    /// ago: wait.
    Paced,
}

/// Whether the claim needs renewing at `now`: no connect token in memory, no
/// known expiry, or the expiry within the margin; paced by the last attempt.
pub(super) fn renewal(
    now: Millis,
    expires_at: Option<Millis>,
    lifetime: Option<Millis>,
    has_connect_token: bool,
    last_attempt_at: Option<Millis>,
    policy: &Policy,
) -> Renewal {
    let margin = renew_margin(lifetime, policy);
    let due = !has_connect_token || expires_at.is_none_or(|at| at - now <= margin);
    if !due {
        Renewal::NotDue
    } else if last_attempt_at.is_some_and(|at| now - at < MIN_RENEW_INTERVAL_MS) {
        Renewal::Paced
    } else {
        Renewal::Due
    }
}

/// How long from `now` until [`renewal`] says `Due` (0: now).
pub(crate) fn renewal_due_in(
    now: Millis,
    expires_at: Option<Millis>,
    lifetime: Option<Millis>,
    has_connect_token: bool,
    last_attempt_at: Option<Millis>,
    policy: &Policy,
) -> Millis {
    let due_at = match expires_at {
        Some(at) if has_connect_token => at - renew_margin(lifetime, policy),
        _ => now,
    };
    let paced_until = last_attempt_at.map_or(now, |at| at + MIN_RENEW_INTERVAL_MS);
    (due_at.max(paced_until) - now).max(0)
}

#[cfg(test)]
mod tests;
