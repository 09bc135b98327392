//! Exponential backoff with full jitter.
//!
//! Full jitter (a uniform delay in `[0, min(max, base * 2^n)]`) spreads the
//! retries of many orchestrators that failed at the same instant, which is
//! exactly what happens when the fleet API blips.

use std::time::Duration;

use rand::Rng;

/// Delays between attempts: `base * 2^attempt`, capped at `max`, jittered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub base: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// Delays from `base`, doubling up to `max`.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// The uncapped-by-jitter ceiling for the `attempt`-th retry (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        // 2^20 * base is already far beyond any sensible max; the shift cap
        // keeps the multiplication from overflowing.
        let factor = 1u32 << attempt.min(20);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// A random delay in `[0, ceiling(attempt)]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_at(attempt, rand::rng().random_range(0.0..=1.0))
    }

    /// The delay for a given draw `unit` in `[0, 1]` (clamped): the pure
    /// part of [`Backoff::delay`], for callers that supply the randomness.
    pub fn delay_at(&self, attempt: u32, unit: f64) -> Duration {
        self.ceiling(attempt).mul_f64(unit.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_and_caps() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(1), Duration::from_millis(200));
        assert_eq!(b.ceiling(3), Duration::from_millis(800));
        assert_eq!(b.ceiling(4), Duration::from_secs(1));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn delay_stays_within_the_ceiling() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        for attempt in 0..40 {
            assert!(b.delay(attempt) <= b.ceiling(attempt));
        }
        assert_eq!(
            Backoff::new(Duration::ZERO, Duration::ZERO).delay(3),
            Duration::ZERO
        );
    }

    #[test]
    fn delay_at_scales_the_ceiling_by_the_draw() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(b.delay_at(2, 1.0), Duration::from_millis(400));
        assert_eq!(b.delay_at(2, 0.5), Duration::from_millis(200));
        assert_eq!(b.delay_at(2, 0.0), Duration::ZERO);
        assert_eq!(b.delay_at(9, 7.0), Duration::from_secs(1));
    }
}
