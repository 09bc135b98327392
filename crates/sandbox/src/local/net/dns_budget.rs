//! What one sandbox's DNS lookups may cost the host.
//!
//! Each learned address is an nft call run by Garrison, outside the
//! sandbox's CPU quota, and an element in a kernel set. A sandbox that
//! resolves random names of a wildcard domain in a loop must not turn
//! that into unbounded host work: nft updates are rate limited, the
//! addresses a sandbox holds at once are capped, and an address already
//! held for at least as long costs nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Longest an answer keeps its addresses open (and the TTL the sandbox's
/// client is told): a name that moves is followed within this.
pub(crate) const MAX_TTL_SECS: u32 = 300;
/// Shortest: a zero TTL must still let the client connect.
pub(crate) const MIN_TTL_SECS: u32 = 5;
/// Addresses held at once per sandbox.
pub(crate) const MAX_LEARNED: usize = 1024;
/// nft updates per second, and the burst allowed above it.
const UPDATES_PER_SEC: f64 = 10.0;
const UPDATE_BURST: f64 = 40.0;

/// Why an answer's addresses were not learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Too many updates lately; the client retries.
    RateLimited,
    /// The sandbox holds [`MAX_LEARNED`] addresses already.
    Full,
}

/// The budget of one sandbox's resolver.
#[derive(Debug)]
pub(crate) struct Budget {
    tokens: f64,
    refilled: Instant,
    /// Learned addresses and when their set element times out.
    held: HashMap<IpAddr, Instant>,
}

impl Budget {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            tokens: UPDATE_BURST,
            refilled: now,
            held: HashMap::new(),
        }
    }

    /// The answers (address, TTL already bounded) that need an nft update,
    /// charged to the budget; empty when everything is held long enough.
    pub(crate) fn admit(
        &mut self,
        now: Instant,
        answers: &[(IpAddr, u32)],
    ) -> Result<Vec<(IpAddr, u32)>, Refusal> {
        self.held.retain(|_, until| *until > now);
        let needed: Vec<(IpAddr, u32)> = answers
            .iter()
            .filter(|(ip, ttl)| {
                let until = now + Duration::from_secs(u64::from(*ttl));
                self.held.get(ip).is_none_or(|held| *held < until)
            })
            .copied()
            .collect();
        if needed.is_empty() {
            return Ok(needed);
        }
        let fresh = needed
            .iter()
            .filter(|(ip, _)| !self.held.contains_key(ip))
            .count();
        if self.held.len() + fresh > MAX_LEARNED {
            return Err(Refusal::Full);
        }
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * UPDATES_PER_SEC).min(UPDATE_BURST);
        self.refilled = now;
        if self.tokens < 1.0 {
            return Err(Refusal::RateLimited);
        }
        self.tokens -= 1.0;
        for (ip, ttl) in &needed {
            self.held
                .insert(*ip, now + Duration::from_secs(u64::from(*ttl)));
        }
        Ok(needed)
    }
}

/// A TTL as the resolver uses it.
pub(crate) fn bounded_ttl(ttl: u32) -> u32 {
    ttl.clamp(MIN_TTL_SECS, MAX_TTL_SECS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> IpAddr {
        IpAddr::from((0xc633_6400u32 + n).to_be_bytes())
    }

    #[test]
    fn an_address_held_long_enough_costs_nothing() {
        let t0 = Instant::now();
        let mut b = Budget::new(t0);
        assert_eq!(b.admit(t0, &[(ip(1), 60)]).unwrap(), vec![(ip(1), 60)]);
        assert_eq!(b.admit(t0, &[(ip(1), 30)]).unwrap(), vec![]);
        // Longer than held: renewed.
        assert_eq!(b.admit(t0, &[(ip(1), 120)]).unwrap(), vec![(ip(1), 120)]);
        // Expired: learned again.
        let later = t0 + Duration::from_secs(121);
        assert_eq!(b.admit(later, &[(ip(1), 60)]).unwrap(), vec![(ip(1), 60)]);
    }

    #[test]
    fn updates_are_rate_limited_and_refill_with_time() {
        let t0 = Instant::now();
        let mut b = Budget::new(t0);
        let mut admitted = 0;
        for n in 0..100 {
            if b.admit(t0, &[(ip(n), 60)]).is_ok() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, UPDATE_BURST as usize);
        assert_eq!(b.admit(t0, &[(ip(500), 60)]), Err(Refusal::RateLimited));
        let later = t0 + Duration::from_secs(1);
        assert!(b.admit(later, &[(ip(500), 60)]).is_ok());
    }

    #[test]
    fn a_sandbox_holds_a_bounded_number_of_addresses() {
        let mut now = Instant::now();
        let mut b = Budget::new(now);
        let mut n = 0;
        loop {
            now += Duration::from_secs(1);
            let batch: Vec<(IpAddr, u32)> = (n..n + 8).map(|i| (ip(i), 3600)).collect();
            match b.admit(now, &batch) {
                Ok(_) => n += 8,
                Err(refusal) => {
                    assert_eq!(refusal, Refusal::Full);
                    break;
                }
            }
        }
        assert_eq!(n as usize, MAX_LEARNED);
    }

    #[test]
    fn ttls_are_bounded() {
        assert_eq!(bounded_ttl(0), MIN_TTL_SECS);
        assert_eq!(bounded_ttl(60), 60);
        assert_eq!(bounded_ttl(86_400), MAX_TTL_SECS);
    }
}
