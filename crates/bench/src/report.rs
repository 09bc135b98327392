//! Figures of `garrison bench queue`: percentiles, the printed table and the
//! one-line JSON object, with each target checked next to its figure.
//! [`Summary`], [`row`], [`verdict`] and [`round`] serve `bench sandbox` too.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

/// Garrison's own overhead (enqueued -> remote started), p50.
pub(crate) const TARGET_OVERHEAD_P50_MS: f64 = 50.0;
/// The same, p99.
pub(crate) const TARGET_OVERHEAD_P99_MS: f64 = 100.0;
/// Poll p50 / watch p50, enqueued -> connected.
pub(crate) const TARGET_SPEEDUP: f64 = 20.0;

/// Distribution of one series of samples, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Summary {
    /// Nearest-rank percentiles: with 200 samples p99 is the 198th smallest,
    /// so two outliers do not move it but three do.
    pub(crate) fn of(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let k = (p * sorted.len() as f64).ceil() as usize;
            sorted[k.clamp(1, sorted.len()) - 1]
        };
        Self {
            n: sorted.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            max: sorted[sorted.len() - 1],
        }
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "n": self.n,
            "p50": round(self.p50),
            "p99": round(self.p99),
            "mean": round(self.mean),
            "max": round(self.max),
        })
    }
}

/// One phase: the same sessions served by one way of discovering work.
#[derive(Clone, Debug, Default)]
pub(crate) struct PhaseReport {
    pub sessions: usize,
    /// What the issue asks for: enqueued -> remote connected at the gateway.
    pub enqueue_to_connected: Summary,
    /// Garrison's own overhead: enqueued -> remote process started.
    pub overhead: Summary,
    /// Enqueued -> claim accepted by the server (discovery + claim call).
    pub discover_and_claim: Summary,
    /// Claimed (as Garrison recorded it) -> sandbox created: resolving the
    /// binary, recording the start, creating the sandbox.
    pub claim_to_sandbox: Summary,
    /// Sandbox created -> remote started: verifying and copying the binary
    /// in, spawning it through the shim.
    pub sandbox_to_started: Summary,
    /// Remote started -> connected. The host backend's spawn returns once
    /// the shim has executed the remote, so most of the remote's own start
    /// is already in `sandbox_to_started`; this is what is left of its dial.
    pub remote_startup: Summary,
    /// Fleet API requests the server counted during the phase.
    pub fleet_requests: u64,
    /// The same, by route as the client counted them (list and watch apart).
    pub client_routes: BTreeMap<String, u64>,
}

impl PhaseReport {
    pub(crate) fn requests_per_session(&self) -> f64 {
        if self.sessions == 0 {
            return 0.0;
        }
        self.fleet_requests as f64 / self.sessions as f64
    }

    fn json(&self) -> Value {
        json!({
            "sessions": self.sessions,
            "enqueue_to_connected_ms": self.enqueue_to_connected.json(),
            "overhead_ms": self.overhead.json(),
            "breakdown_ms": {
                "discover_and_claim": self.discover_and_claim.json(),
                "claim_to_sandbox_created": self.claim_to_sandbox.json(),
                "sandbox_created_to_remote_started": self.sandbox_to_started.json(),
                "remote_started_to_connected": self.remote_startup.json(),
            },
            "fleet_requests": self.fleet_requests,
            "fleet_requests_per_session": round(self.requests_per_session()),
            "client_requests_by_route": self.client_routes,
        })
    }
}

/// List calls while nothing is queued, with the watch open.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdleReport {
    pub window: Duration,
    pub relist_interval: Duration,
    /// List requests the client sent in the window.
    pub list_calls: u64,
    /// Watch streams opened in the window (reconnects).
    pub watch_opens: u64,
    /// `GET /opbeta/outposts/devins` as the server counted them: lists and
    /// watch opens together (the server does not tell them apart).
    pub server_list_or_watch: u64,
}

impl IdleReport {
    /// The most periodic re-lists a window of this length can hold.
    pub(crate) fn periodic_allowance(&self) -> u64 {
        let interval = self.relist_interval.as_secs_f64();
        if interval <= 0.0 {
            return 0;
        }
        (self.window.as_secs_f64() / interval).ceil() as u64
    }

    /// List calls per minute beyond the periodic re-list.
    pub(crate) fn excess_per_minute(&self) -> f64 {
        let minutes = self.window.as_secs_f64() / 60.0;
        if minutes <= 0.0 {
            return 0.0;
        }
        self.list_calls.saturating_sub(self.periodic_allowance()) as f64 / minutes
    }

    fn json(&self) -> Value {
        json!({
            "window_secs": self.window.as_secs_f64(),
            "relist_interval_secs": self.relist_interval.as_secs_f64(),
            "list_calls": self.list_calls,
            "watch_opens": self.watch_opens,
            "server_list_or_watch": self.server_list_or_watch,
            "periodic_relists_allowed": self.periodic_allowance(),
            "excess_list_calls_per_min": round(self.excess_per_minute()),
        })
    }
}

/// The steps between "sandbox created" and "remote started", each timed
/// alone (see `probe`).
#[derive(Clone, Debug, Default)]
pub(crate) struct StartSteps {
    pub binary_bytes: u64,
    /// Reading the cached binary and checking its SHA-256 again.
    pub verify: Summary,
    /// Putting it into the sandbox (`put_executable`; on the host backend
    /// a hard link to the one stored copy, written once per process).
    pub put: Summary,
    /// Spawning a process through the shim.
    pub spawn: Summary,
}

impl StartSteps {
    fn json(&self) -> Value {
        json!({
            "binary_bytes": self.binary_bytes,
            "verify_ms": self.verify.json(),
            "put_ms": self.put.json(),
            "shim_spawn_ms": self.spawn.json(),
        })
    }
}

/// Everything one run measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Report {
    pub watch: PhaseReport,
    pub poll: PhaseReport,
    pub poll_interval: Duration,
    pub idle: IdleReport,
    pub start_steps: StartSteps,
}

impl Report {
    /// Poll p50 / watch p50, enqueued -> connected.
    pub(crate) fn speedup(&self) -> f64 {
        let watch = self.watch.enqueue_to_connected.p50;
        if watch <= 0.0 {
            return 0.0;
        }
        self.poll.enqueue_to_connected.p50 / watch
    }

    fn overhead_ok(&self) -> bool {
        self.watch.overhead.n > 0 && self.watch.overhead.p50 < TARGET_OVERHEAD_P50_MS
    }

    fn overhead_p99_ok(&self) -> bool {
        self.watch.overhead.n > 0 && self.watch.overhead.p99 < TARGET_OVERHEAD_P99_MS
    }

    fn speedup_ok(&self) -> bool {
        self.speedup() >= TARGET_SPEEDUP
    }

    fn idle_ok(&self) -> bool {
        self.idle.excess_per_minute() == 0.0
    }

    /// The human-readable table.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        let w = &self.watch;
        let p = &self.poll;
        let poll_secs = self.poll_interval.as_secs_f64();
        let _ = writeln!(
            out,
            "garrison bench queue: host backend, {} sessions watch-driven, {} sessions polling every {poll_secs} s",
            w.sessions, p.sessions
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<48} {:>10} {:>10} {:>10} {:>10} {:>5}",
            "enqueued -> remote connected (ms)", "p50", "p99", "mean", "max", "n"
        );
        row(
            &mut out,
            "  Garrison, watch-driven",
            &w.enqueue_to_connected,
        );
        row(
            &mut out,
            &format!("  polling every {poll_secs} s"),
            &p.enqueue_to_connected,
        );
        let _ = writeln!(
            out,
            "  speedup (poll p50 / watch p50): {:.1}x   target >= {TARGET_SPEEDUP}x   {}",
            self.speedup(),
            verdict(self.speedup_ok())
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<48} {:>10} {:>10} {:>10} {:>10} {:>5}",
            "watch-driven, step by step (ms)", "p50", "p99", "mean", "max", "n"
        );
        row(
            &mut out,
            "  enqueued -> claimed (discovery + claim)",
            &w.discover_and_claim,
        );
        row(
            &mut out,
            "  claimed -> sandbox created",
            &w.claim_to_sandbox,
        );
        row(
            &mut out,
            "  sandbox created -> remote started",
            &w.sandbox_to_started,
        );
        row(
            &mut out,
            "  = Garrison overhead: enqueued -> started",
            &w.overhead,
        );
        row(
            &mut out,
            "  remote started -> connected (rest of dial)",
            &w.remote_startup,
        );
        let _ = writeln!(
            out,
            "  overhead p50 {:.1} ms   target < {TARGET_OVERHEAD_P50_MS} ms   {}",
            w.overhead.p50,
            verdict(self.overhead_ok())
        );
        let _ = writeln!(
            out,
            "  overhead p99 {:.1} ms   target < {TARGET_OVERHEAD_P99_MS} ms   {}",
            w.overhead.p99,
            verdict(self.overhead_p99_ok())
        );
        let steps = &self.start_steps;
        let _ = writeln!(
            out,
            "  sandbox created -> remote started, each step alone ({:.1} MB binary):",
            steps.binary_bytes as f64 / 1e6
        );
        row(&mut out, "    read + verify SHA-256", &steps.verify);
        row(
            &mut out,
            "    put into sandbox (host: hard link)",
            &steps.put,
        );
        row(&mut out, "    spawn through the shim", &steps.spawn);
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "polling, step by step (ms): discovery + claim p50 {:.1} / p99 {:.1}, overhead p50 {:.1} / p99 {:.1}",
            p.discover_and_claim.p50, p.discover_and_claim.p99, p.overhead.p50, p.overhead.p99
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "fleet API requests per session served (server-counted)"
        );
        for (name, phase) in [("watch-driven", w), ("polling", p)] {
            let routes = phase
                .client_routes
                .iter()
                .map(|(route, n)| format!("{route}: {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                out,
                "  {name:<14} {:>6.2}  ({} requests; client by route: {routes})",
                phase.requests_per_session(),
                phase.fleet_requests
            );
        }
        let _ = writeln!(out);
        let i = &self.idle;
        let _ = writeln!(
            out,
            "idle, watch-driven ({:.0} s window, periodic re-list every {:.0} s)",
            i.window.as_secs_f64(),
            i.relist_interval.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "  list calls {} (periodic allowance {}), watch opens {}, server-counted list+watch {}",
            i.list_calls,
            i.periodic_allowance(),
            i.watch_opens,
            i.server_list_or_watch
        );
        let _ = writeln!(
            out,
            "  list calls per minute beyond the periodic re-list: {:.1}   target 0   {}",
            i.excess_per_minute(),
            verdict(self.idle_ok())
        );
        out
    }

    /// The same figures as one JSON object.
    pub(crate) fn json(&self) -> Value {
        json!({
            "bench": "queue",
            "backend": "host",
            "watch": self.watch.json(),
            "poll": {
                "interval_ms": self.poll_interval.as_millis() as u64,
                "phase": self.poll.json(),
            },
            "speedup_p50": round(self.speedup()),
            "idle": self.idle.json(),
            "start_steps": self.start_steps.json(),
            "targets": {
                "overhead_p50_ms": { "target": TARGET_OVERHEAD_P50_MS, "value": round(self.watch.overhead.p50), "pass": self.overhead_ok() },
                "overhead_p99_ms": { "target": TARGET_OVERHEAD_P99_MS, "value": round(self.watch.overhead.p99), "pass": self.overhead_p99_ok() },
                "speedup": { "target": TARGET_SPEEDUP, "value": round(self.speedup()), "pass": self.speedup_ok() },
                "idle_excess_list_calls_per_min": { "target": 0, "value": round(self.idle.excess_per_minute()), "pass": self.idle_ok() },
            },
        })
    }
}

pub(super) fn row(out: &mut String, label: &str, s: &Summary) {
    let _ = writeln!(
        out,
        "{label:<48} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>5}",
        s.p50, s.p99, s.mean, s.max, s.n
    );
}

pub(super) fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

/// Two decimals are plenty for milliseconds and ratios.
pub(super) fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=200).map(f64::from).collect();
        let s = Summary::of(&samples);
        assert_eq!((s.n, s.p50, s.p99, s.max), (200, 100.0, 198.0, 200.0));
        assert_eq!(Summary::of(&[7.0]).p99, 7.0);
        assert_eq!(Summary::of(&[]).n, 0);
    }

    #[test]
    fn overhead_targets_are_checked_at_p50_and_p99() {
        let mut report = Report::default();
        // p50 within its target, p99 beyond it.
        let samples: Vec<f64> = (1..=100)
            .map(|i| if i > 98 { 150.0 } else { 20.0 })
            .collect();
        report.watch.overhead = Summary::of(&samples);
        let targets = &report.json()["targets"];
        assert_eq!(
            targets["overhead_p50_ms"],
            json!({ "target": TARGET_OVERHEAD_P50_MS, "value": 20.0, "pass": true })
        );
        assert_eq!(
            targets["overhead_p99_ms"],
            json!({ "target": TARGET_OVERHEAD_P99_MS, "value": 150.0, "pass": false })
        );
        let table = report.table();
        assert!(
            table.contains("overhead p50 20.0 ms   target < 50 ms   PASS"),
            "{table}"
        );
        assert!(
            table.contains("overhead p99 150.0 ms   target < 100 ms   MISS"),
            "{table}"
        );
        assert!(
            table.contains("put into sandbox (host: hard link)"),
            "{table}"
        );
        assert!(report.json()["start_steps"]["put_ms"].is_object());

        // No sessions measured: nothing passes.
        let empty = Report::default().json();
        assert_eq!(empty["targets"]["overhead_p99_ms"]["pass"], false);
    }

    #[test]
    fn idle_excess_allows_the_periodic_relist() {
        let idle = IdleReport {
            window: Duration::from_secs(30),
            relist_interval: Duration::from_secs(30),
            list_calls: 1,
            ..Default::default()
        };
        assert_eq!(idle.excess_per_minute(), 0.0);
        let busy = IdleReport {
            list_calls: 4,
            ..idle
        };
        assert_eq!(busy.excess_per_minute(), 6.0);
    }
}
