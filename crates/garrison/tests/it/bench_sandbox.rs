//! `garrison bench sandbox` with the local backend and `--peer podman`, at
//! tiny sizes: the report carries the churn targets and Podman's figures
//! with Garrison's ratios, and the run leaves nothing behind. Needs root,
//! the test image (`GARRISON_TEST_IMAGES`) and Podman (`scripts/setup`);
//! skips without root or the image.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn garrison_bin() -> &'static str {
    env!("CARGO_BIN_EXE_garrison")
}

/// Runs `garrison bench sandbox` on the test images with `sizes` and
/// `options` and `--json`; returns the JSON report and the whole stdout.
fn bench_json(images: &Path, state: &Path, sizes: &[&str], options: &[&str]) -> (Value, String) {
    let out = Command::new(garrison_bin())
        .args(["bench", "sandbox"])
        .args(sizes)
        .args(options)
        .arg("--json")
        .arg("--state-dir")
        .arg(state)
        .arg("--images-dir")
        .arg(images)
        .output()
        .expect("garrison runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{options:?}: {stdout}\n{stderr}");
    let report = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    (report, stdout)
}

/// The test images, when running as root with them built; else says why
/// the test is skipped (`why_root`: what needs root).
fn test_images(why_root: &str) -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: {why_root}");
        return None;
    }
    let images = std::env::var_os("GARRISON_TEST_IMAGES").map(PathBuf::from);
    if images.is_none() {
        eprintln!("skipped: GARRISON_TEST_IMAGES is not set (scripts/test sets it)");
    }
    images
}

#[test]
fn bench_sandbox_with_podman_as_peer_reports_targets_and_ratios() {
    let Some(images) = test_images("the local backend and podman need root") else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let (report, stdout) = bench_json(
        &images,
        state.path(),
        &[
            "--sessions",
            "2",
            "--files",
            "20",
            "--file-kb",
            "4",
            "--rounds",
            "1",
        ],
        &["--policy", "false", "--peer", "podman", "--peer-runs", "2"],
    );

    for target in ["destroy_p50_ms", "restore_p50_s"] {
        let t = &report["targets"][target];
        assert!(t["target"].is_number(), "{target}: {t}");
        assert!(t["value"].as_f64().unwrap() > 0.0, "{target}: {t}");
        assert!(t["pass"].is_boolean(), "{target}: {t}");
    }
    let peer = &report["peer"];
    assert_eq!(peer["name"], "podman", "{peer}");
    assert!(!peer["version"].as_str().unwrap().is_empty(), "{peer}");
    for figure in ["start_to_first_output_ms", "remove_ms"] {
        assert_eq!(peer[figure]["n"], 2, "{figure}: {peer}");
        assert!(
            peer[figure]["p50"].as_f64().unwrap() > 0.0,
            "{figure}: {peer}"
        );
    }
    for ratio in ["start", "remove"] {
        assert!(
            peer["ratios"][ratio].as_f64().unwrap() > 0.0,
            "{ratio}: {peer}"
        );
    }
    assert!(stdout.contains("Garrison / podman"), "{stdout}");

    // The scratch directory, Podman's storage in it included, is gone.
    let left: Vec<_> = std::fs::read_dir(state.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|name| name.to_string_lossy().starts_with("bench-sandbox-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let state_path = state.path().to_string_lossy().into_owned();
    assert!(!mounts.contains(&state_path), "a mount is left: {mounts}");
}

/// `--runtime` at tiny sizes, once per runtime: each report names its
/// runtime and carries the start latency and the syscall-heavy workload's
/// time (no figure is judged: the point is that both are measured).
#[test]
fn bench_sandbox_reports_start_and_workload_under_each_runtime() {
    let Some(images) = test_images("the local backend needs root") else {
        return;
    };
    for runtime in ["runc", "runsc"] {
        let state = tempfile::tempdir().unwrap();
        let (report, stdout) = bench_json(
            &images,
            state.path(),
            &[
                "--sessions",
                "1",
                "--files",
                "2",
                "--file-kb",
                "1",
                "--rounds",
                "1",
            ],
            &[
                "--policy",
                "false",
                "--workload-files",
                "50",
                "--runtime",
                runtime,
            ],
        );
        assert_eq!(report["runtime"], runtime, "{report}");
        assert_eq!(report["create_to_started_ms"]["n"], 1, "{report}");
        assert!(report["create_to_started_ms"]["p50"].as_f64().unwrap() > 0.0);
        let status = &report["workload"]["git_status_ms"];
        assert_eq!(status["n"], 1, "{report}");
        assert!(status["p50"].as_f64().unwrap() > 0.0, "{report}");
        assert_eq!(report["workload"]["files"], 50, "{report}");
        assert!(
            stdout.contains(&format!("local backend on {runtime}")),
            "{stdout}"
        );
        assert!(stdout.contains("git status"), "{stdout}");
    }
}
