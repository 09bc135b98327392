//! `/metrics`: the Prometheus text exposition format (version 0.0.4),
//! written by hand.
//!
//! Hand-written rather than the `prometheus-client` crate: Garrison exports
//! a fixed, small set of series read from state it already keeps (atomic
//! counters, the state store, the fleet client's request stats, the queue
//! views), so a registry would only duplicate that state. The format is a
//! few lines of text; the tests below parse the output back.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::metrics::{HistogramSnapshot, Metrics};
use crate::planner::StageLabel;

/// Accumulates one exposition document.
#[derive(Default)]
pub(crate) struct Exposition {
    out: String,
}

/// Escapes a label value: backslash, double quote and newline.
fn escape_label(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Escapes HELP text: backslash and newline.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

impl Exposition {
    /// An empty exposition.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, pairs: &[(&str, &str)], value: f64) {
        let _ = writeln!(self.out, "{name}{} {}", labels(pairs), number(value));
    }

    /// A counter without labels; `name` ends in `_total`.
    pub(crate) fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.header(name, "counter", help);
        self.sample(name, &[], value as f64);
    }

    /// Adds a gauge.
    pub(crate) fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// A family of one kind with labelled samples (written even when empty,
    /// so HELP and TYPE are always there).
    pub(crate) fn family(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        samples: &[(Vec<(&str, &str)>, f64)],
    ) {
        self.header(name, kind, help);
        for (pairs, value) in samples {
            self.sample(name, pairs, *value);
        }
    }

    /// A histogram: cumulative `_bucket{le=..}` ending in `+Inf`, `_sum`,
    /// `_count`.
    pub(crate) fn histogram(&mut self, name: &str, help: &str, h: &HistogramSnapshot) {
        self.header(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, bound) in h.bounds.iter().enumerate() {
            cumulative += h.counts.get(i).copied().unwrap_or(0);
            self.sample(&bucket, &[("le", &number(*bound))], cumulative as f64);
        }
        self.sample(&bucket, &[("le", "+Inf")], h.count as f64);
        self.sample(&format!("{name}_sum"), &[], h.sum);
        self.sample(&format!("{name}_count"), &[], h.count as f64);
    }

    /// The exposition text.
    pub(crate) fn finish(self) -> String {
        self.out
    }
}

/// What `/metrics` shows besides [`Metrics`]: read from the store, the
/// fleet client and the queue views at scrape time.
pub(crate) struct Scrape<'a> {
    /// Garrison's counters.
    pub metrics: &'a Metrics,
    /// Recorded sessions by stage label.
    pub sessions_by_stage: BTreeMap<String, u64>,
    /// The fleet API requests, per route.
    pub fleet: fleet::RequestStats,
    /// Each outpost's queue.
    pub outposts: Vec<OutpostScrape>,
    /// Whether every outpost is synced.
    pub ready: bool,
    /// Garrison's version.
    pub version: &'a str,
    /// When serving started.
    pub started_at_ms: i64,
    /// Writes to the state store since this process opened it.
    pub store_writes: u64,
}

/// One outpost's queue, for the exposition.
pub(crate) struct OutpostScrape {
    /// The outpost.
    pub outpost_id: String,
    /// Watch reconnections.
    pub watch_reconnects: u64,
    /// Full relists.
    pub relists: u64,
    /// When the view was last in sync.
    pub synced_at_ms: i64,
    /// Sessions waiting.
    pub pending: u64,
}

/// Renders every `garrison_*` series.
pub(crate) fn render(s: &Scrape<'_>) -> String {
    let m = s.metrics;
    let mut e = Exposition::new();
    e.family(
        "garrison_build_info",
        "gauge",
        "Garrison's version; always 1.",
        &[(vec![("version", s.version)], 1.0)],
    );
    e.gauge(
        "garrison_start_time_seconds",
        "When this Garrison process started serving (Unix time).",
        s.started_at_ms as f64 / 1000.0,
    );
    e.gauge(
        "garrison_ready",
        "1 when the fleet API is reachable, every queue view is fresh and the state directory has room for new sessions (as /readyz).",
        if s.ready { 1.0 } else { 0.0 },
    );

    // Every stage, so each `garrison_sessions` series exists from the start
    // (a series that appears late breaks `rate()` and alerts).
    let mut stages: BTreeMap<&str, u64> = StageLabel::ALL.iter().map(|l| (l.as_str(), 0)).collect();
    for (label, n) in &s.sessions_by_stage {
        *stages.entry(label.as_str()).or_default() += n;
    }
    let samples: Vec<_> = stages
        .iter()
        .map(|(label, n)| (vec![("stage", *label)], *n as f64))
        .collect();
    e.family(
        "garrison_sessions",
        "gauge",
        "Sessions recorded in the state store, by stage.",
        &samples,
    );

    let counters: [(&str, &str, &std::sync::atomic::AtomicU64); 9] = [
        (
            "garrison_claims_won_total",
            "Claims this Garrison won.",
            &m.claims_won,
        ),
        (
            "garrison_claims_lost_total",
            "Claims lost to another acceptor (409).",
            &m.claims_lost,
        ),
        (
            "garrison_claim_renewals_total",
            "Claim renewals sent.",
            &m.claim_renewals,
        ),
        (
            "garrison_remotes_started_total",
            "devin-remote processes started (restarts included).",
            &m.remotes_started,
        ),
        (
            "garrison_remote_restarts_total",
            "devin-remote processes restarted after a crash.",
            &m.remote_restarts,
        ),
        (
            "garrison_checksum_refusals_total",
            "Sessions refused because the devin-remote binary failed its SHA-256 check.",
            &m.checksum_refusals,
        ),
        (
            "garrison_sessions_finished_total",
            "Sessions this process finished (any way).",
            &m.sessions_finished,
        ),
        (
            "garrison_snapshots_total",
            "Workspace snapshots taken.",
            &m.snapshots_taken,
        ),
        (
            "garrison_snapshot_bytes_total",
            "Bytes of workspace snapshots taken.",
            &m.snapshot_bytes,
        ),
    ];
    for (name, help, counter) in counters {
        e.counter(name, help, Metrics::get(counter));
    }
    e.counter(
        "garrison_store_writes_total",
        "Statements that changed the state store (each its own commit).",
        s.store_writes,
    );

    e.histogram(
        "garrison_queue_to_running_seconds",
        "From the queue entry's creation to its remote started.",
        &m.queue_to_running.snapshot(),
    );
    e.histogram(
        "garrison_sandbox_start_seconds",
        "From the sandbox create call to the remote started.",
        &m.sandbox_start.snapshot(),
    );
    e.histogram(
        "garrison_snapshot_duration_seconds",
        "Time to take a workspace snapshot.",
        &m.snapshot_duration.snapshot(),
    );

    let mut requests = Vec::new();
    let mut retries = Vec::new();
    let mut responses = Vec::new();
    let mut errors = Vec::new();
    let mut skipped = Vec::new();
    let codes: Vec<(&str, Vec<(String, u64)>)> = s
        .fleet
        .routes
        .iter()
        .map(|(route, r)| {
            (
                *route,
                r.responses
                    .iter()
                    .map(|(c, n)| (c.to_string(), *n))
                    .collect(),
            )
        })
        .collect();
    for (route, r) in &s.fleet.routes {
        requests.push((vec![("route", *route)], r.requests as f64));
        retries.push((vec![("route", *route)], r.retries as f64));
        skipped.push((vec![("route", *route)], r.skipped_items as f64));
        for (kind, n) in &r.errors {
            errors.push((vec![("route", *route), ("kind", *kind)], *n as f64));
        }
    }
    for (route, by_code) in &codes {
        for (code, n) in by_code {
            responses.push((vec![("route", *route), ("code", code.as_str())], *n as f64));
        }
    }
    e.family(
        "garrison_fleet_requests_total",
        "counter",
        "Fleet API requests sent, by route (retries included).",
        &requests,
    );
    e.family(
        "garrison_fleet_retries_total",
        "counter",
        "Fleet API requests that were automatic retries, by route.",
        &retries,
    );
    e.family(
        "garrison_fleet_responses_total",
        "counter",
        "Fleet API responses, by route and HTTP status code.",
        &responses,
    );
    e.family(
        "garrison_fleet_errors_total",
        "counter",
        "Fleet API errors (failed attempts or streams), by route and kind.",
        &errors,
    );
    e.family(
        "garrison_fleet_skipped_items_total",
        "counter",
        "List items or watch events dropped as unparseable, by route.",
        &skipped,
    );

    let per_outpost = |f: &dyn Fn(&OutpostScrape) -> f64| -> Vec<(Vec<(&str, &str)>, f64)> {
        s.outposts
            .iter()
            .map(|o| (vec![("outpost", o.outpost_id.as_str())], f(o)))
            .collect()
    };
    e.family(
        "garrison_watch_reconnects_total",
        "counter",
        "Queue watch stream reconnects, by outpost.",
        &per_outpost(&|o| o.watch_reconnects as f64),
    );
    e.family(
        "garrison_queue_relists_total",
        "counter",
        "Complete queue lists, by outpost.",
        &per_outpost(&|o| o.relists as f64),
    );
    e.family(
        "garrison_queue_synced_timestamp_seconds",
        "gauge",
        "When the queue view was last confirmed by the fleet API (Unix time; 0 never).",
        &per_outpost(&|o| o.synced_at_ms as f64 / 1000.0),
    );
    e.family(
        "garrison_queue_pending",
        "gauge",
        "Pending entries of the served platform in the queue view, by outpost.",
        &per_outpost(&|o| o.pending as f64),
    );
    e.finish()
}

#[cfg(test)]
mod tests;
