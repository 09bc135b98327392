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
pub struct Exposition {
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
    pub fn new() -> Self {
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
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.header(name, "counter", help);
        self.sample(name, &[], value as f64);
    }

    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// A family of one kind with labelled samples (written even when empty,
    /// so HELP and TYPE are always there).
    pub fn family(
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
    pub fn histogram(&mut self, name: &str, help: &str, h: &HistogramSnapshot) {
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

    pub fn finish(self) -> String {
        self.out
    }
}

/// What `/metrics` shows besides [`Metrics`]: read from the store, the
/// fleet client and the queue views at scrape time.
pub struct Scrape<'a> {
    pub metrics: &'a Metrics,
    /// Recorded sessions by stage label.
    pub sessions_by_stage: BTreeMap<String, u64>,
    pub fleet: fleet::RequestStats,
    pub outposts: Vec<OutpostScrape>,
    pub ready: bool,
    pub version: &'a str,
    pub started_at_ms: i64,
    /// Writes to the state store since this process opened it.
    pub store_writes: u64,
}

pub struct OutpostScrape {
    pub outpost_id: String,
    pub watch_reconnects: u64,
    pub relists: u64,
    pub synced_at_ms: i64,
    pub pending: u64,
}

/// Renders every `garrison_*` series.
pub fn render(s: &Scrape<'_>) -> String {
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
        "1 when the fleet API is reachable and every queue view is fresh (as /readyz).",
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
mod tests {
    use super::*;

    /// One parsed sample line.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: Vec<(String, String)>,
        value: f64,
    }

    fn parse_labels(text: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut chars = text.chars().peekable();
        while chars.peek().is_some() {
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            assert_eq!(
                chars.next(),
                Some('"'),
                "label value must be quoted: {text}"
            );
            let mut value = String::new();
            loop {
                match chars.next().expect("unterminated label value") {
                    '\\' => match chars.next().expect("dangling escape") {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => panic!("bad escape \\{c}"),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            assert!(
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "bad label name {key:?}"
            );
            out.push((key, value));
            match chars.next() {
                Some(',') | None => {}
                Some(c) => panic!("unexpected {c:?} after a label in {text}"),
            }
        }
        out
    }

    fn parse_value(v: &str) -> f64 {
        match v {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().unwrap_or_else(|_| panic!("not a number: {v:?}")),
        }
    }

    /// Parses the exposition and checks its shape: every sample belongs to a
    /// family declared by HELP then TYPE, names are valid.
    fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
        let mut types = BTreeMap::new();
        let mut helped = std::collections::BTreeSet::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP has text");
                assert!(!help.is_empty());
                assert!(helped.insert(name.to_owned()), "HELP twice for {name}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
                assert!(helped.contains(name), "TYPE before HELP for {name}");
                assert!(
                    ["counter", "gauge", "histogram"].contains(&kind),
                    "kind {kind}"
                );
                assert!(types.insert(name.to_owned(), kind.to_owned()).is_none());
            } else {
                assert!(!line.starts_with('#') && !line.is_empty(), "line {line:?}");
                let (series, value) = line.rsplit_once(' ').expect("sample has a value");
                let (name, labels) = match series.split_once('{') {
                    Some((n, l)) => (n, parse_labels(l.strip_suffix('}').expect("closing }"))),
                    None => (series, Vec::new()),
                };
                assert!(
                    name.starts_with("garrison_")
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "bad metric name {name}"
                );
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| {
                        name.strip_suffix(s)
                            .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
                    })
                    .unwrap_or(name);
                assert!(types.contains_key(family), "sample {name} without TYPE");
                samples.push(Sample {
                    name: name.to_owned(),
                    labels,
                    value: parse_value(value),
                });
            }
        }
        (types, samples)
    }

    fn scrape(metrics: &Metrics) -> String {
        let mut fleet = fleet::RequestStats::default();
        let mut claim = fleet::RouteStats {
            requests: 3,
            retries: 1,
            ..Default::default()
        };
        claim.responses.insert(200, 2);
        claim.responses.insert(409, 1);
        claim.errors.insert("timeout", 1);
        fleet.routes.insert(fleet::stats::route::CLAIM, claim);
        render(&Scrape {
            metrics,
            sessions_by_stage: [("running".to_owned(), 2), ("terminated".to_owned(), 5)]
                .into_iter()
                .collect(),
            fleet,
            outposts: vec![OutpostScrape {
                outpost_id: "outpost_\"odd\"\\id\n".into(),
                watch_reconnects: 4,
                relists: 7,
                synced_at_ms: 1_700_000_000_000,
                pending: 1,
            }],
            ready: true,
            version: "0.1.0",
            started_at_ms: 1_700_000_000_000,
            store_writes: 12,
        })
    }

    #[test]
    fn every_family_has_help_and_type_and_numeric_values() {
        let metrics = Metrics::default();
        Metrics::inc(&metrics.claims_won);
        metrics.record_snapshot(1500.0, 4096);
        let text = scrape(&metrics);
        let (types, samples) = parse(&text);
        for name in [
            "garrison_sessions",
            "garrison_claims_won_total",
            "garrison_claims_lost_total",
            "garrison_claim_renewals_total",
            "garrison_remote_restarts_total",
            "garrison_remotes_started_total",
            "garrison_checksum_refusals_total",
            "garrison_snapshot_bytes_total",
            "garrison_fleet_requests_total",
            "garrison_fleet_errors_total",
            "garrison_watch_reconnects_total",
        ] {
            assert!(types.contains_key(name), "{name} missing\n{text}");
        }
        for name in [
            "garrison_queue_to_running_seconds",
            "garrison_sandbox_start_seconds",
            "garrison_snapshot_duration_seconds",
        ] {
            assert_eq!(types[name], "histogram");
        }
        for (name, kind) in &types {
            if kind == "counter" {
                assert!(name.ends_with("_total"), "counter {name}");
            }
        }
        assert!(samples.iter().all(|s| !s.value.is_nan()));
        let get = |name: &str, label: Option<(&str, &str)>| {
            samples
                .iter()
                .find(|s| {
                    s.name == name
                        && label.is_none_or(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
                })
                .unwrap_or_else(|| panic!("{name} {label:?} missing\n{text}"))
                .value
        };
        assert_eq!(get("garrison_claims_won_total", None), 1.0);
        assert_eq!(get("garrison_store_writes_total", None), 12.0);
        assert_eq!(get("garrison_snapshot_bytes_total", None), 4096.0);
        assert_eq!(get("garrison_sessions", Some(("stage", "running"))), 2.0);
        assert_eq!(get("garrison_sessions", Some(("stage", "failed"))), 0.0);
        assert_eq!(
            get(
                "garrison_fleet_requests_total",
                Some(("route", fleet::stats::route::CLAIM))
            ),
            3.0
        );
        assert_eq!(
            get("garrison_fleet_responses_total", Some(("code", "409"))),
            1.0
        );
        assert_eq!(
            get("garrison_fleet_errors_total", Some(("kind", "timeout"))),
            1.0
        );
        // The odd outpost id survives escaping and parsing.
        assert_eq!(
            get(
                "garrison_watch_reconnects_total",
                Some(("outpost", "outpost_\"odd\"\\id\n"))
            ),
            4.0
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_in_inf() {
        let metrics = Metrics::default();
        for ms in [10.0, 40.0, 300.0, 2_000.0, 2_000.0, 9_000_000.0] {
            metrics.record_queue_to_running(ms);
        }
        let text = scrape(&metrics);
        let (_, samples) = parse(&text);
        for family in [
            "garrison_queue_to_running_seconds",
            "garrison_sandbox_start_seconds",
            "garrison_snapshot_duration_seconds",
        ] {
            let buckets: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.name == format!("{family}_bucket"))
                .collect();
            assert!(buckets.len() > 2);
            let les: Vec<f64> = buckets
                .iter()
                .map(|b| {
                    assert_eq!(b.labels.len(), 1);
                    assert_eq!(b.labels[0].0, "le");
                    parse_value(&b.labels[0].1)
                })
                .collect();
            assert!(les.windows(2).all(|w| w[0] < w[1]), "le ascending {les:?}");
            assert_eq!(*les.last().unwrap(), f64::INFINITY);
            assert!(
                buckets.windows(2).all(|w| w[0].value <= w[1].value),
                "cumulative"
            );
            let count = samples
                .iter()
                .find(|s| s.name == format!("{family}_count"))
                .unwrap()
                .value;
            assert_eq!(buckets.last().unwrap().value, count);
            assert!(samples.iter().any(|s| s.name == format!("{family}_sum")));
        }
        let bucket = |le: &str| {
            samples
                .iter()
                .find(|s| {
                    s.name == "garrison_queue_to_running_seconds_bucket" && s.labels[0].1 == le
                })
                .unwrap()
                .value
        };
        assert_eq!(bucket("0.05"), 2.0);
        assert_eq!(bucket("0.5"), 3.0);
        assert_eq!(bucket("2.5"), 5.0);
        assert_eq!(bucket("300"), 5.0);
        assert_eq!(bucket("+Inf"), 6.0);
    }
}
