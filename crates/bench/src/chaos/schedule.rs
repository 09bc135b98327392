//! The seeded scheduler: which fault starts next, on which host, for how
//! long. [`decide`] is a pure function of the seed, the tick and the faults
//! in force, so a run's choices are replayed from its seed (the faults'
//! effects on Garrison are not: they depend on timing).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::history::FaultKind;

/// A fault in force, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Active {
    /// What.
    pub kind: FaultKind,
    /// Where (`None`: the fleet API).
    pub host: Option<usize>,
}

/// A fault to start now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Plan {
    /// What.
    pub kind: FaultKind,
    /// Where (`None`: the fleet API).
    pub host: Option<usize>,
    /// How long until it is healed (for `kill_restart`: until the restart).
    pub duration_ms: u64,
    /// For `api_errors` and `lost_answers`: the share of requests hit.
    pub rate: f64,
    /// For `clock_step`: how far the host's wall clock is stepped, in
    /// seconds (negative: back).
    pub step_secs: i64,
}

/// What the scheduler may do.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Hosts in the fleet.
    pub hosts: usize,
    /// Lifetime of a claim: a pause outlasts it.
    pub claim_ttl_ms: u64,
    /// Faults in force at once, at most.
    pub max_active: usize,
    /// Chance that a tick with room starts a fault.
    pub start_chance: f64,
    /// Whether clock steps can be injected (libfaketime is there).
    pub clock_steps: bool,
}

/// The fault to start at `tick`, if any: none while `max_active` are in
/// force; a per-host fault only on a host without one, and never on the
/// last healthy host (so sessions keep being served); at most one of each
/// fleet-wide kind; clock steps only when `clock_steps`. Kinds are drawn
/// evenly among those allowed.
pub(crate) fn decide(seed: u64, tick: u64, active: &[Active], limits: &Limits) -> Option<Plan> {
    if active.len() >= limits.max_active {
        return None;
    }
    // One generator per tick: the choice at a tick depends on nothing but
    // its inputs.
    let mut rng = StdRng::seed_from_u64(seed ^ tick.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    if !rng.random_bool(limits.start_chance.clamp(0.0, 1.0)) {
        return None;
    }
    let busy: Vec<usize> = active.iter().filter_map(|a| a.host).collect();
    let free: Vec<usize> = (0..limits.hosts).filter(|h| !busy.contains(h)).collect();
    let host_room = free.len() >= 2;
    let kinds: Vec<FaultKind> = FaultKind::ALL
        .into_iter()
        .filter(|k| *k != FaultKind::ClockStep || limits.clock_steps)
        .filter(|k| {
            if k.per_host() {
                host_room && (*k != FaultKind::DiskFull || !active.iter().any(|a| a.kind == *k))
            } else {
                !active.iter().any(|a| a.kind == *k)
            }
        })
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let kind = kinds[rng.random_range(0..kinds.len())];
    let host = kind
        .per_host()
        .then(|| free[rng.random_range(0..free.len())]);
    let ttl = limits.claim_ttl_ms;
    let mut step_secs = 0;
    let (duration_ms, rate) = match kind {
        FaultKind::KillRestart => (rng.random_range(500..6_000), 0.0),
        FaultKind::Pause => (ttl + rng.random_range(2_000..8_000), 0.0),
        FaultKind::CutFleet | FaultKind::CutStore | FaultKind::CutBoth => {
            (rng.random_range(5_000..20_000), 0.0)
        }
        FaultKind::ApiErrors => (rng.random_range(5_000..15_000), rng.random_range(0.3..0.7)),
        FaultKind::LostAnswers => (rng.random_range(5_000..15_000), rng.random_range(0.2..0.5)),
        FaultKind::DiskFull => (rng.random_range(8_000..20_000), 0.0),
        FaultKind::ClockStep => {
            // Past a claim's life either way: a clock read against the
            // server's deadlines would misjudge every claim it holds.
            let by: i64 = rng.random_range(5..=90);
            step_secs = if rng.random_bool(0.5) { by } else { -by };
            (rng.random_range(10_000..30_000), 0.0)
        }
    };
    Some(Plan {
        kind,
        host,
        duration_ms,
        rate,
        step_secs,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const LIMITS: Limits = Limits {
        hosts: 3,
        claim_ttl_ms: 10_000,
        max_active: 3,
        start_chance: 0.6,
        clock_steps: true,
    };

    /// Runs the scheduler over `ticks` two-second ticks, healing each fault
    /// when its time is up; every plan with the faults it joined.
    fn simulate(seed: u64, ticks: u64) -> Vec<(Plan, Vec<Active>)> {
        simulate_with(seed, ticks, &LIMITS)
    }

    fn simulate_with(seed: u64, ticks: u64, limits: &Limits) -> Vec<(Plan, Vec<Active>)> {
        let mut active: Vec<(Active, u64)> = Vec::new();
        let mut plans = Vec::new();
        for tick in 0..ticks {
            let now = tick * 2_000;
            active.retain(|(_, until)| *until > now);
            let current: Vec<Active> = active.iter().map(|(a, _)| *a).collect();
            if let Some(plan) = decide(seed, tick, &current, limits) {
                plans.push((plan, current));
                let a = Active {
                    kind: plan.kind,
                    host: plan.host,
                };
                active.push((a, now + plan.duration_ms));
            }
        }
        plans
    }

    #[test]
    fn the_same_seed_gives_the_same_faults() {
        let a = simulate(42, 90);
        let b = simulate(42, 90);
        assert_eq!(a, b);
        assert_ne!(a, simulate(43, 90), "another seed, other faults");
    }

    #[test]
    fn three_minutes_bring_every_kind_and_plenty_of_faults() {
        for seed in 0..20 {
            let plans = simulate(seed, 90);
            let kinds: BTreeSet<FaultKind> = plans.iter().map(|(p, _)| p.kind).collect();
            assert!(plans.len() >= 20, "seed {seed}: {} faults", plans.len());
            assert!(kinds.len() >= 6, "seed {seed}: kinds {kinds:?}");
        }
    }

    #[test]
    fn faults_overlap_within_the_limits() {
        let mut overlapped = 0;
        for seed in 0..20 {
            for (plan, joined) in simulate(seed, 90) {
                assert!(joined.len() < LIMITS.max_active);
                overlapped += usize::from(!joined.is_empty());
                if let Some(host) = plan.host {
                    assert!(joined.iter().all(|a| a.host != Some(host)), "one per host");
                    let busy = joined.iter().filter(|a| a.host.is_some()).count();
                    assert!(busy < LIMITS.hosts - 1, "one host stays healthy");
                } else {
                    assert!(joined.iter().all(|a| a.kind != plan.kind));
                }
                if plan.kind == FaultKind::DiskFull {
                    assert!(joined.iter().all(|a| a.kind != FaultKind::DiskFull));
                }
            }
        }
        assert!(overlapped > 100, "faults overlap: {overlapped}");
    }

    #[test]
    fn a_pause_outlives_a_claim_and_rates_are_shares() {
        for seed in 0..20 {
            for (plan, _) in simulate(seed, 90) {
                if plan.kind == FaultKind::Pause {
                    assert!(plan.duration_ms > LIMITS.claim_ttl_ms);
                }
                assert!((0.0..1.0).contains(&plan.rate));
                assert_eq!(plan.host.is_some(), plan.kind.per_host());
                assert_eq!(plan.step_secs != 0, plan.kind == FaultKind::ClockStep);
            }
        }
    }

    #[test]
    fn clock_steps_go_both_ways_on_one_host_and_are_healed() {
        let (mut forward, mut back, mut freed, mut steps) = (0, 0, 0, 0);
        for seed in 0..20 {
            let plans = simulate(seed, 90);
            for (n, (plan, _)) in plans.iter().enumerate() {
                if plan.kind != FaultKind::ClockStep {
                    continue;
                }
                let host = plan.host.expect("a clock step is on one host");
                assert!((5..=90).contains(&plan.step_secs.abs()), "{plan:?}");
                assert!((10_000..30_000).contains(&plan.duration_ms), "{plan:?}");
                forward += usize::from(plan.step_secs > 0);
                back += usize::from(plan.step_secs < 0);
                // Healed: its host takes other faults once it is over
                // (most do; the run ends, or the draw goes elsewhere).
                let step = Active {
                    kind: FaultKind::ClockStep,
                    host: Some(host),
                };
                steps += 1;
                freed +=
                    usize::from(plans[n + 1..].iter().any(|(later, joined)| {
                        later.host == Some(host) && !joined.contains(&step)
                    }));
            }
        }
        assert!(forward > 10 && back > 10, "{forward} forward, {back} back");
        assert!(freed * 2 > steps, "{freed} of {steps} hosts freed");
    }

    #[test]
    fn no_clock_steps_without_libfaketime() {
        let limits = Limits {
            clock_steps: false,
            ..LIMITS
        };
        for seed in 0..20 {
            let plans = simulate_with(seed, 90, &limits);
            assert!(plans.iter().all(|(p, _)| p.kind != FaultKind::ClockStep));
            assert!(plans.len() >= 20, "the other kinds still run");
        }
    }

    #[test]
    fn nothing_starts_when_the_limit_is_reached() {
        let full = [
            Active {
                kind: FaultKind::ApiErrors,
                host: None,
            },
            Active {
                kind: FaultKind::Pause,
                host: Some(0),
            },
            Active {
                kind: FaultKind::CutFleet,
                host: Some(1),
            },
        ];
        assert!((0..100).all(|t| decide(7, t, &full, &LIMITS).is_none()));
        // Two hosts busy: only fleet-wide kinds are left.
        for t in 0..100 {
            if let Some(p) = decide(7, t, &full[1..], &LIMITS) {
                assert!(!p.kind.per_host(), "{p:?}");
            }
        }
    }
}
