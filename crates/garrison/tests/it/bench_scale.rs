//! `garrison bench scale` with tiny numbers: it runs end to end (the
//! emulator on loopback, Garrison as a child process, remotes through the
//! host backend) and prints its figures as JSON, each target with a value
//! and a verdict. The figures themselves are the bench's business, not the
//! test's.

use std::process::Command;

use crate::common::garrison_bin;
use serde_json::Value;

#[test]
fn bench_scale_runs_and_reports_every_target() {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(garrison_bin())
        .args([
            "bench",
            "scale",
            "--sessions",
            "4",
            "--hold-secs",
            "6",
            "--probes",
            "2",
            "--pace-ms",
            "20",
            "--claim-ttl-secs",
            "10",
            "--json",
        ])
        .env("GARRISON_CONFIG", home.path().join("no-config"))
        .env("TMPDIR", home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let json: Value = serde_json::from_str(stdout.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(json["bench"], "scale");
    assert_eq!(json["sessions"], 4);
    // A 10 s claim is renewed every 5 s: once at least in 6 s of idling.
    assert_eq!(json["health"]["renewals_expected_per_session"], 1);
    assert_eq!(json["health"]["connected_at_end"], 4, "{stdout}");
    assert_eq!(json["health"]["missed_deadlines"], 0, "{stdout}");
    assert_eq!(json["new_session"]["overhead_ms"]["n"], 2);
    assert_eq!(json["ramp"]["enqueue_to_connected_ms"]["n"], 4);
    assert!(json["idle"]["cpu_seconds"].is_number());
    assert!(json["idle"]["rss_mb"].as_f64().unwrap() > 0.0);
    assert!(
        json["idle"]["fleet_requests"].as_u64().unwrap() > 0,
        "renewals"
    );
    assert!(
        json["idle"]["store_writes"].as_u64().unwrap() > 0,
        "renewals"
    );
    assert!(json["admin_listing_bytes"].as_u64().unwrap() > 0);
    let targets = json["targets"].as_object().unwrap();
    for name in [
        "all_connected_and_renewed",
        "missed_deadlines",
        "new_session_overhead_p50_ms",
        "new_session_overhead_p99_ms",
        "rss_mb",
        "rss_mb_per_100_sessions",
        "idle_cpu_percent_of_one_core",
        "idle_cpu_seconds_per_100_sessions_hour",
        "idle_fleet_requests_per_session_hour",
        "idle_store_writes_per_sec",
    ] {
        let t = &targets[name];
        assert!(
            t["value"].is_number() && t["target"].is_number() && t["pass"].is_boolean(),
            "{name}: {t}"
        );
    }
    assert_eq!(targets["missed_deadlines"]["pass"], true);
    // Nothing of the run is left behind.
    let left: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("garrison-bench-scale-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
