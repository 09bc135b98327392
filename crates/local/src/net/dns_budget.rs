//! What one sandbox's DNS lookups may cost the host.
//!
//! Each query is work for Garrison, outside the sandbox's CPU quota: a
//! datagram to parse, an upstream socket, the answer to screen. Each
//! learned address is an nft call run by Garrison and an element in a
//! kernel set. A sandbox that resolves random names in a loop must not
//! turn that into unbounded host work, so the resolver handles at most
//! [`QUERIES_PER_SEC`] messages a second (bursts of [`QUERY_BURST`]), nft
//! updates are rate limited, the addresses a sandbox holds at once are
//! capped, and an address already held for at least as long costs nothing.
//!
//! The query budget is far above what builds and package installs ask: a
//! lookup is two queries (A and AAAA, glibc asks both), an `apt-get
//! install`, `pip install` or `npm install` resolves a handful of hosts
//! (package managers keep their connections, npm caches lookups), and
//! their bursts are tens of queries, at most a few hundred. A loop of
//! lookups asks thousands a second and meets it within milliseconds; from
//! then on it gets 100 answers a second, about as many as a legitimate
//! session could use, and the rest of its queries are never read (see
//! `dns.rs`).

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
/// Messages a sandbox's resolver handles per second (every query it reads,
/// answered upstream or locally, so every upstream query and answer), and
/// the burst allowed above it; see the module's doc for why these.
pub const QUERIES_PER_SEC: f64 = 100.0;
/// See [`QUERIES_PER_SEC`].
pub const QUERY_BURST: f64 = 400.0;

/// A token bucket: `rate` tokens a second, holding at most `burst`; starts
/// full. Time is passed in, so tests choose it.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    refilled: Instant,
}

impl TokenBucket {
    pub(crate) fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            refilled: now,
        }
    }

    /// Takes a token; without one, how long until there is one.
    pub(crate) fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.refilled = now.max(self.refilled);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
    }
}

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
    updates: TokenBucket,
    /// Learned addresses and when their set element times out.
    held: HashMap<IpAddr, Instant>,
}

impl Budget {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            updates: TokenBucket::new(UPDATES_PER_SEC, UPDATE_BURST, now),
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
        if self.updates.take(now).is_err() {
            return Err(Refusal::RateLimited);
        }
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
    fn the_query_bucket_gives_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(QUERIES_PER_SEC, QUERY_BURST, t0);
        let burst = (0..10_000).take_while(|_| b.take(t0).is_ok()).count();
        assert_eq!(burst, QUERY_BURST as usize);
        // Empty: the wait is one token's worth.
        let wait = b.take(t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs_f64(1.0 / QUERIES_PER_SEC));
        assert!(b.take(t0 + wait).is_ok());
        // Over ten seconds of a flood that asks every millisecond, it lets
        // through the rate, and nothing is saved up beyond the burst.
        let mut now = t0 + wait;
        let mut passed = 0;
        for _ in 0..10_000 {
            now += Duration::from_millis(1);
            passed += usize::from(b.take(now).is_ok());
        }
        let expected = 10.0 * QUERIES_PER_SEC;
        assert!((passed as f64 - expected).abs() <= 1.0, "{passed}");
        let idle = now + Duration::from_secs(3600);
        let burst = (0..10_000).take_while(|_| b.take(idle).is_ok()).count();
        assert_eq!(burst, QUERY_BURST as usize);
    }

    #[test]
    fn a_clock_that_steps_back_takes_nothing_extra() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut b = TokenBucket::new(10.0, 2.0, t0);
        assert!(b.take(t0).is_ok() && b.take(t0).is_ok());
        assert!(b.take(t0 - Duration::from_secs(5)).is_err());
        assert!(b.take(t0).is_err());
        assert!(b.take(t0 + Duration::from_millis(100)).is_ok());
    }

    #[test]
    fn ttls_are_bounded() {
        assert_eq!(bounded_ttl(0), MIN_TTL_SECS);
        assert_eq!(bounded_ttl(60), 60);
        assert_eq!(bounded_ttl(86_400), MAX_TTL_SECS);
    }
}
