//! How soon a runner with nothing to do looks at its session again.
//!
//! A session that is settled (recorded running, its remote running, its
//! entry running, no operator request) is looked at less and less often
//! while nothing changes, up to [`SETTLED_LOOK_MAX_MS`]: a thousand of them
//! would otherwise cost ten thousand looks a second. Anything else is
//! looked at every [`LOOK_MS`]. A look is never later than the claim's
//! renewal, and a change of the entry or an operator request wakes the
//! runner at once whatever the wait.

use fleet::SessionStatus;

use super::stage::Stage;
use super::terms::{EntryObs, Millis, RemoteObs};

/// The cadence of a session that is not settled.
pub(super) const LOOK_MS: Millis = 100;
/// The longest a settled session goes unlooked at: how late a remote's
/// exit or its newest output may be noticed.
pub(super) const SETTLED_LOOK_MAX_MS: Millis = 5_000;

/// What [`look_again_in`] looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LookObs {
    /// The recorded stage.
    pub stage: Stage,
    /// The remote's state.
    pub remote: RemoteObs,
    /// What the queue says.
    pub entry: EntryObs,
    /// An operator asked to stop the session.
    pub operator_stop: bool,
    /// Looks in a row that found nothing new.
    pub quiet_looks: u32,
    /// How long until the claim must be renewed.
    pub renewal_due_in_ms: Millis,
}

/// Milliseconds until the next look when the plan is to wait.
pub(crate) fn look_again_in(obs: &LookObs) -> Millis {
    let settled = obs.stage == Stage::Running
        && obs.remote == RemoteObs::Running
        && obs.entry == EntryObs::Present(SessionStatus::Running)
        && !obs.operator_stop;
    let wait = if settled {
        // Doubles with each quiet look: 100, 200, 400 ... ms.
        let shift = obs.quiet_looks.min(16);
        (LOOK_MS << shift).min(SETTLED_LOOK_MAX_MS)
    } else {
        LOOK_MS
    };
    wait.min(obs.renewal_due_in_ms.max(LOOK_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled(quiet_looks: u32) -> LookObs {
        LookObs {
            stage: Stage::Running,
            remote: RemoteObs::Running,
            entry: EntryObs::Present(SessionStatus::Running),
            operator_stop: false,
            quiet_looks,
            renewal_due_in_ms: 200_000,
        }
    }

    #[test]
    fn a_settled_session_is_looked_at_less_often_while_nothing_changes() {
        let waits: Vec<Millis> = (0..8).map(|n| look_again_in(&settled(n))).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        assert_eq!(look_again_in(&settled(u32::MAX)), SETTLED_LOOK_MAX_MS);
    }

    #[test]
    fn anything_unsettled_is_looked_at_every_look() {
        let cases = [
            LookObs {
                stage: Stage::Starting,
                ..settled(9)
            },
            LookObs {
                remote: RemoteObs::Exited(0),
                ..settled(9)
            },
            LookObs {
                remote: RemoteObs::Lost,
                ..settled(9)
            },
            LookObs {
                entry: EntryObs::Present(SessionStatus::Suspended),
                ..settled(9)
            },
            LookObs {
                entry: EntryObs::Gone,
                ..settled(9)
            },
            LookObs {
                entry: EntryObs::Unknown,
                ..settled(9)
            },
            LookObs {
                operator_stop: true,
                ..settled(9)
            },
        ];
        for obs in cases {
            assert_eq!(look_again_in(&obs), LOOK_MS, "{obs:?}");
        }
    }

    #[test]
    fn a_look_is_never_later_than_the_renewal() {
        let due_soon = LookObs {
            renewal_due_in_ms: 700,
            ..settled(9)
        };
        assert_eq!(look_again_in(&due_soon), 700);
        let due_now = LookObs {
            renewal_due_in_ms: 0,
            ..settled(9)
        };
        assert_eq!(look_again_in(&due_now), LOOK_MS);
    }
}
