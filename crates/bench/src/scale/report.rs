//! Figures of `garrison bench scale`: the table, the JSON object and each
//! target checked next to its figure.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::report::{Summary, round, row, verdict};

/// Garrison's resident memory with every session running.
pub(super) const TARGET_RSS_MB: f64 = 300.0;
/// Garrison's CPU while every session idles, percent of one core.
pub(super) const TARGET_IDLE_CPU_PERCENT: f64 = 5.0;
/// Garrison's overhead (enqueued -> remote started) for a new session
/// while the others run.
pub(super) const TARGET_NEW_SESSION_P99_MS: f64 = 100.0;
pub(super) const TARGET_NEW_SESSION_P50_MS: f64 = 50.0;
/// Fleet API requests while idle, over the renewals the claims need: the
/// rest (re-lists, watch reopenings) is a quarter of that at most.
pub(super) const REQUEST_ALLOWANCE: f64 = 1.25;
/// State-store writes per renewal: the session record, its event, and
/// the watch cursor of the renewal's echo.
pub(super) const WRITES_PER_RENEWAL: f64 = 3.0;

/// The sessions that ramped up to the full count.
#[derive(Clone, Debug, Default)]
pub(super) struct Ramp {
    pub enqueue_to_connected: Summary,
    pub overhead: Summary,
    /// First enqueue to the last remote connected.
    pub duration: Duration,
}

/// Garrison's use while every session idles.
#[derive(Clone, Debug, Default)]
pub(super) struct Idle {
    pub window: Duration,
    pub cpu: Duration,
    pub rss_kib_max: u64,
    pub fleet_requests: u64,
    pub store_writes: u64,
}

/// Whether every session stayed served.
#[derive(Clone, Debug, Default)]
pub(super) struct Health {
    pub connected_at_end: usize,
    /// `claim_expired` in the emulator's transcripts: a deadline missed.
    pub missed_deadlines: usize,
    /// Sessions whose remote connected more than once (a restart).
    pub reconnected: usize,
    pub renewals_min: u64,
    /// The renewals a claim needs over the hold.
    pub renewals_expected: u64,
}

#[derive(Clone, Debug, Default)]
pub(super) struct ScaleReport {
    pub sessions: usize,
    pub claim_ttl: Duration,
    /// How often a claim is renewed (its lifetime less the margin).
    pub renew_every: Duration,
    pub ramp: Ramp,
    pub idle: Idle,
    pub health: Health,
    /// New sessions while the others run.
    pub probe_enqueue_to_connected: Summary,
    pub probe_overhead: Summary,
    /// `GET /api/sessions` with every session listed.
    pub admin_listing: Summary,
    pub admin_listing_bytes: usize,
    /// Every session terminated at once -> every claim released.
    pub wind_down: Duration,
}

impl ScaleReport {
    fn hundreds(&self) -> f64 {
        (self.sessions as f64 / 100.0).max(0.01)
    }

    fn idle_hours(&self) -> f64 {
        self.idle.window.as_secs_f64() / 3600.0
    }

    pub(super) fn cpu_percent(&self) -> f64 {
        let secs = self.idle.window.as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        self.idle.cpu.as_secs_f64() / secs * 100.0
    }

    /// CPU seconds per 100 sessions per hour of idling.
    pub(super) fn cpu_per_100_hour(&self) -> f64 {
        if self.idle_hours() <= 0.0 {
            return 0.0;
        }
        self.idle.cpu.as_secs_f64() / self.hundreds() / self.idle_hours()
    }

    pub(super) fn rss_mb(&self) -> f64 {
        self.idle.rss_kib_max as f64 / 1024.0
    }

    pub(super) fn requests_per_session_hour(&self) -> f64 {
        if self.sessions == 0 || self.idle_hours() <= 0.0 {
            return 0.0;
        }
        self.idle.fleet_requests as f64 / self.sessions as f64 / self.idle_hours()
    }

    pub(super) fn writes_per_sec(&self) -> f64 {
        let secs = self.idle.window.as_secs_f64();
        if secs <= 0.0 {
            return 0.0;
        }
        self.idle.store_writes as f64 / secs
    }

    fn renewals_per_session_hour(&self) -> f64 {
        let every = self.renew_every.as_secs_f64();
        if every <= 0.0 { 0.0 } else { 3600.0 / every }
    }

    fn requests_target(&self) -> f64 {
        round(self.renewals_per_session_hour() * REQUEST_ALLOWANCE)
    }

    fn writes_target(&self) -> f64 {
        round(
            self.renewals_per_session_hour() / 3600.0
                * self.sessions as f64
                * WRITES_PER_RENEWAL
                * REQUEST_ALLOWANCE,
        )
    }

    /// CPU per 100 sessions-hour that keeps the whole under its target.
    fn cpu_per_100_target(&self) -> f64 {
        round(TARGET_IDLE_CPU_PERCENT / 100.0 * 3600.0 / self.hundreds())
    }

    fn rss_per_100_target(&self) -> f64 {
        round(TARGET_RSS_MB / self.hundreds())
    }

    fn all_served(&self) -> bool {
        let h = &self.health;
        self.sessions > 0
            && h.connected_at_end == self.sessions
            && h.missed_deadlines == 0
            && h.renewals_min >= h.renewals_expected
    }

    /// Every figure with its target: `(name, value, target, pass)`.
    pub(super) fn targets(&self) -> Vec<(&'static str, f64, f64, bool)> {
        let p = &self.probe_overhead;
        let probed = p.n > 0;
        vec![
            (
                "all_connected_and_renewed",
                self.health.connected_at_end as f64,
                self.sessions as f64,
                self.all_served(),
            ),
            (
                "missed_deadlines",
                self.health.missed_deadlines as f64,
                0.0,
                self.health.missed_deadlines == 0,
            ),
            (
                "new_session_overhead_p50_ms",
                round(p.p50),
                TARGET_NEW_SESSION_P50_MS,
                probed && p.p50 < TARGET_NEW_SESSION_P50_MS,
            ),
            (
                "new_session_overhead_p99_ms",
                round(p.p99),
                TARGET_NEW_SESSION_P99_MS,
                probed && p.p99 < TARGET_NEW_SESSION_P99_MS,
            ),
            (
                "rss_mb",
                round(self.rss_mb()),
                TARGET_RSS_MB,
                self.rss_mb() < TARGET_RSS_MB,
            ),
            (
                "rss_mb_per_100_sessions",
                round(self.rss_mb() / self.hundreds()),
                self.rss_per_100_target(),
                self.rss_mb() / self.hundreds() < self.rss_per_100_target(),
            ),
            (
                "idle_cpu_percent_of_one_core",
                round(self.cpu_percent()),
                TARGET_IDLE_CPU_PERCENT,
                self.cpu_percent() < TARGET_IDLE_CPU_PERCENT,
            ),
            (
                "idle_cpu_seconds_per_100_sessions_hour",
                round(self.cpu_per_100_hour()),
                self.cpu_per_100_target(),
                self.cpu_per_100_hour() < self.cpu_per_100_target(),
            ),
            (
                "idle_fleet_requests_per_session_hour",
                round(self.requests_per_session_hour()),
                self.requests_target(),
                self.requests_per_session_hour() <= self.requests_target(),
            ),
            (
                "idle_store_writes_per_sec",
                round(self.writes_per_sec()),
                self.writes_target(),
                self.writes_per_sec() <= self.writes_target(),
            ),
        ]
    }

    pub(super) fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "garrison bench scale: host backend, {} sessions, claims of {} s renewed every {} s, idle for {} s",
            self.sessions,
            self.claim_ttl.as_secs(),
            self.renew_every.as_secs(),
            self.idle.window.as_secs()
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<48} {:>10} {:>10} {:>10} {:>10} {:>5}",
            "(ms)", "p50", "p99", "mean", "max", "n"
        );
        row(
            &mut out,
            "ramp: enqueued -> connected",
            &self.ramp.enqueue_to_connected,
        );
        row(
            &mut out,
            "ramp: Garrison overhead (-> remote started)",
            &self.ramp.overhead,
        );
        row(
            &mut out,
            "new session: enqueued -> connected",
            &self.probe_enqueue_to_connected,
        );
        row(
            &mut out,
            "new session: Garrison overhead",
            &self.probe_overhead,
        );
        row(
            &mut out,
            &format!("GET /api/sessions ({} bytes)", self.admin_listing_bytes),
            &self.admin_listing,
        );
        let _ = writeln!(
            out,
            "ramp took {:.1} s; winding every session down took {:.1} s",
            self.ramp.duration.as_secs_f64(),
            self.wind_down.as_secs_f64()
        );
        let h = &self.health;
        let _ = writeln!(
            out,
            "connected at the end {}/{}, missed deadlines {}, reconnected {}, renewals per session >= {} (needed {})",
            h.connected_at_end,
            self.sessions,
            h.missed_deadlines,
            h.reconnected,
            h.renewals_min,
            h.renewals_expected
        );
        let _ = writeln!(
            out,
            "idle: CPU {:.2} s ({:.2}% of one core), RSS max {:.1} MB, {} fleet API requests, {} store writes",
            self.idle.cpu.as_secs_f64(),
            self.cpu_percent(),
            self.rss_mb(),
            self.idle.fleet_requests,
            self.idle.store_writes
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<42} {:>12} {:>12}  verdict",
            "target", "value", "target"
        );
        for (name, value, target, pass) in self.targets() {
            let _ = writeln!(
                out,
                "{name:<42} {value:>12.2} {target:>12.2}  {}",
                verdict(pass)
            );
        }
        out
    }

    pub(super) fn json(&self) -> Value {
        let targets: serde_json::Map<String, Value> = self
            .targets()
            .into_iter()
            .map(|(name, value, target, pass)| {
                (
                    name.to_owned(),
                    json!({ "value": value, "target": target, "pass": pass }),
                )
            })
            .collect();
        let h = &self.health;
        json!({
            "bench": "scale",
            "backend": "host",
            "sessions": self.sessions,
            "claim_ttl_secs": self.claim_ttl.as_secs_f64(),
            "renew_every_secs": self.renew_every.as_secs_f64(),
            "ramp": {
                "enqueue_to_connected_ms": self.ramp.enqueue_to_connected.json(),
                "overhead_ms": self.ramp.overhead.json(),
                "duration_secs": round(self.ramp.duration.as_secs_f64()),
            },
            "idle": {
                "window_secs": self.idle.window.as_secs_f64(),
                "cpu_seconds": round(self.idle.cpu.as_secs_f64()),
                "cpu_percent_of_one_core": round(self.cpu_percent()),
                "cpu_seconds_per_100_sessions_hour": round(self.cpu_per_100_hour()),
                "rss_mb": round(self.rss_mb()),
                "rss_mb_per_100_sessions": round(self.rss_mb() / self.hundreds()),
                "fleet_requests": self.idle.fleet_requests,
                "fleet_requests_per_session_hour": round(self.requests_per_session_hour()),
                "store_writes": self.idle.store_writes,
                "store_writes_per_sec": round(self.writes_per_sec()),
            },
            "health": {
                "connected_at_end": h.connected_at_end,
                "missed_deadlines": h.missed_deadlines,
                "reconnected": h.reconnected,
                "renewals_min_per_session": h.renewals_min,
                "renewals_expected_per_session": h.renewals_expected,
            },
            "new_session": {
                "enqueue_to_connected_ms": self.probe_enqueue_to_connected.json(),
                "overhead_ms": self.probe_overhead.json(),
            },
            "admin_listing_ms": self.admin_listing.json(),
            "admin_listing_bytes": self.admin_listing_bytes,
            "wind_down_secs": round(self.wind_down.as_secs_f64()),
            "targets": targets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> ScaleReport {
        ScaleReport {
            sessions: 1000,
            claim_ttl: Duration::from_secs(300),
            renew_every: Duration::from_secs(240),
            idle: Idle {
                window: Duration::from_secs(600),
                cpu: Duration::from_secs(12),
                rss_kib_max: 200 * 1024,
                fleet_requests: 2_600,
                store_writes: 7_500,
            },
            health: Health {
                connected_at_end: 1000,
                renewals_min: 2,
                renewals_expected: 2,
                ..Default::default()
            },
            probe_overhead: Summary::of(&[20.0, 30.0, 90.0]),
            ..Default::default()
        }
    }

    #[test]
    fn figures_are_per_hundred_sessions_and_per_hour() {
        let r = report();
        assert_eq!(round(r.cpu_percent()), 2.0);
        assert_eq!(round(r.cpu_per_100_hour()), 7.2);
        assert_eq!(round(r.requests_per_session_hour()), 15.6);
        assert_eq!(round(r.writes_per_sec()), 12.5);
        // 15 renewals an hour, a quarter more allowed.
        assert_eq!(r.requests_target(), 18.75);
        assert_eq!(r.cpu_per_100_target(), 18.0);
    }

    #[test]
    fn every_target_passes_or_is_named_a_miss() {
        let r = report();
        assert!(r.targets().iter().all(|(_, _, _, pass)| *pass));
        let json = r.json();
        for (name, _, _, _) in r.targets() {
            let t = &json["targets"][name];
            assert!(t["value"].is_number() && t["target"].is_number(), "{name}");
            assert_eq!(t["pass"], true, "{name}");
        }
        let missed = ScaleReport {
            health: Health {
                missed_deadlines: 1,
                ..r.health.clone()
            },
            ..r
        };
        let json = missed.json();
        assert_eq!(json["targets"]["missed_deadlines"]["pass"], false);
        assert_eq!(json["targets"]["all_connected_and_renewed"]["pass"], false);
        assert!(missed.table().contains("MISS"));
    }
}
