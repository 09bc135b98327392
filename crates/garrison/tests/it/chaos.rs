//! `garrison bench chaos` as part of the suite: two-minute runs of three
//! Garrisons under injected faults (one with a fixed seed, one with a
//! random seed printed for replay), each of which must end with every
//! invariant kept. Under nextest (each test its own process) the two run
//! at once, each with its own bridge, subnet and namespaces; under `cargo
//! test` they take turns.
//!
//! A failure prints the seed, the session's history and where the hosts'
//! logs are kept; replay it with `garrison bench chaos --minutes 2 --seed
//! SEED` (the seed fixes the faults, not their timing against the
//! sessions).
//!
//! Needs root (namespaces, nft, tmpfs) and `GARRISON_TEST_S3_SERVER` (set
//! by `scripts/test`); skipped with a message otherwise.

use std::process::Command;
use std::sync::Mutex;

use crate::common::garrison_bin;
use serde_json::Value;

/// One run at a time within one test process.
static TURN: Mutex<()> = Mutex::new(());

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: bench chaos needs root");
        return false;
    }
    if std::env::var_os("GARRISON_TEST_S3_SERVER").is_none() {
        eprintln!("skipped: GARRISON_TEST_S3_SERVER is unset (scripts/test sets it)");
        return false;
    }
    true
}

fn chaos_run(seed: u64) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    eprintln!(
        "bench chaos with --seed {seed} (replay: garrison bench chaos --minutes 2 --seed {seed})"
    );
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(garrison_bin())
        .args(["bench", "chaos", "--minutes", "2", "--sessions", "16"])
        .args(["--seed", &seed.to_string(), "--json"])
        .env("GARRISON_CONFIG", home.path().join("no-config"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "seed {seed}\n{stdout}\n{stderr}");
    let json: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(json["seed"], seed);
    let violations = json["violations"].as_object().unwrap();
    for invariant in [
        "two_live_remotes",
        "resume_saw_wrong_workspace",
        "claim_held_past_deadline",
        "leftovers_after_end",
        "not_ready_after_heal",
        "unexpected_exit",
        "sessions_unfinished",
    ] {
        assert_eq!(
            violations.get(invariant).and_then(Value::as_u64),
            Some(0),
            "seed {seed}: {invariant}\n{stdout}\n{stderr}"
        );
    }
    let faults = json["faults"].as_object().unwrap();
    let kinds = faults.values().filter(|n| n.as_u64() > Some(0)).count();
    assert!(kinds >= 4, "seed {seed}: {kinds} kinds of fault\n{stdout}");
    assert!(
        json["faults_total"].as_u64() >= Some(10),
        "seed {seed}: too few faults\n{stdout}"
    );
    assert!(
        json["suspend_resume_cycles"].as_u64() > Some(0),
        "seed {seed}: no session resumed\n{stdout}"
    );
}

#[test]
fn two_minutes_of_chaos_with_a_fixed_seed_break_no_invariant() {
    if can_run() {
        chaos_run(20_261_202);
    }
}

#[test]
fn two_minutes_of_chaos_with_a_random_seed_break_no_invariant() {
    if can_run() {
        chaos_run(rand::random::<u32>().into());
    }
}
