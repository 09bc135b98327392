//! The Prometheus exposition: help and type for every family, numeric
//! values, cumulative histogram buckets.

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
            .find(|s| s.name == "garrison_queue_to_running_seconds_bucket" && s.labels[0].1 == le)
            .unwrap()
            .value
    };
    assert_eq!(bucket("0.05"), 2.0);
    assert_eq!(bucket("0.5"), 3.0);
    assert_eq!(bucket("2.5"), 5.0);
    assert_eq!(bucket("300"), 5.0);
    assert_eq!(bucket("+Inf"), 6.0);
}
