//! What `garrison bench chaos` prints: a table on stdout, with `--json`
//! one JSON object as the last line, and on stderr the history of every
//! session (and the log of every host) a violation names.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::checker::{Violation, counts, fault_counts};
use super::history::{FaultKind, History};

/// Why a run has no clock steps (also in the docs).
const NO_CLOCK_STEPS: &str = "skipped: libfaketime not found (scripts/setup installs it)";

/// The figures of one run.
pub(crate) struct ChaosReport {
    pub seed: u64,
    pub minutes: f64,
    pub hosts: usize,
    pub backend: &'static str,
    /// Whether `clock_step` could be injected (libfaketime was there).
    pub clock_steps: bool,
    pub sessions: usize,
    pub suspend_resume_cycles: usize,
    pub resumes_without_workspace: usize,
    /// Snapshots left at the end that are kept by design (see `kept.rs`).
    pub kept_for_retention: usize,
    pub faults: BTreeMap<&'static str, usize>,
    pub violations: BTreeMap<&'static str, usize>,
    pub duration_secs: f64,
}

impl ChaosReport {
    /// The report of `history`, with the breaches the checker found.
    pub(crate) fn of(
        history: &History,
        found: &[Violation],
        seed: u64,
        minutes: f64,
        backend: &'static str,
        clock_steps: bool,
        duration_secs: f64,
    ) -> ChaosReport {
        ChaosReport {
            seed,
            minutes,
            hosts: history.hosts.len(),
            backend,
            clock_steps,
            sessions: history.sessions.len(),
            suspend_resume_cycles: history
                .sessions
                .iter()
                .map(|s| super::checker::sightings(&s.view).len())
                .sum(),
            resumes_without_workspace: history
                .sessions
                .iter()
                .map(super::checker::resumes_from_nothing)
                .sum(),
            kept_for_retention: super::kept::kept_count(history),
            faults: fault_counts(history),
            violations: counts(found),
            duration_secs,
        }
    }

    /// Faults injected in all.
    pub(crate) fn total_faults(&self) -> usize {
        self.faults.values().sum()
    }

    /// The human-readable table.
    pub(crate) fn table(&self) -> String {
        let mut out = format!(
            "chaos: {} hosts ({} backend), {} sessions, {} suspend/resume cycles, {:.1} min of faults, seed {}\n",
            self.hosts,
            self.backend,
            self.sessions,
            self.suspend_resume_cycles,
            self.minutes,
            self.seed
        );
        out.push_str(&format!(
            "faults injected: {} (kinds: {})\n",
            self.total_faults(),
            self.faults.values().filter(|n| **n > 0).count()
        ));
        for (kind, n) in &self.faults {
            out.push_str(&format!("  {kind:<16} {n}\n"));
        }
        out.push_str(&format!(
            "resumes that found no workspace (no suspend before them completed): {}\n",
            self.resumes_without_workspace
        ));
        out.push_str(&format!(
            "snapshots kept for retention (final status unknown, not leftovers): {}\n",
            self.kept_for_retention
        ));
        if !self.clock_steps {
            out.push_str(&format!("clock steps: {NO_CLOCK_STEPS}\n"));
        }
        out.push_str("violations:\n");
        for (invariant, n) in &self.violations {
            out.push_str(&format!("  {invariant:<28} {n}\n"));
        }
        out.push_str(&format!(
            "run took {:.0} s; replay with --seed {}\n",
            self.duration_secs, self.seed
        ));
        out
    }

    /// Kinds this run could not inject.
    fn skipped_kinds(&self) -> Vec<&'static str> {
        let clock = (!self.clock_steps).then_some(FaultKind::ClockStep.name());
        clock.into_iter().collect()
    }

    /// The JSON object (one line).
    pub(crate) fn json(&self) -> String {
        json!({
            "bench": "chaos",
            "seed": self.seed,
            "minutes": self.minutes,
            "hosts": self.hosts,
            "backend": self.backend,
            "sessions": self.sessions,
            "suspend_resume_cycles": self.suspend_resume_cycles,
            "resumes_without_workspace": self.resumes_without_workspace,
            "kept_for_retention": self.kept_for_retention,
            "faults": self.faults,
            "faults_total": self.total_faults(),
            "violations": self.violations,
            "skipped_kinds": self.skipped_kinds(),
            "duration_secs": self.duration_secs.round(),
        })
        .to_string()
    }
}

/// Each breach, then the history of each session and the log tail of each
/// host named, on stderr.
pub(crate) fn explain(history: &History, found: &[Violation], logs: &[String]) {
    let mut sessions = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for v in found {
        eprintln!(
            "VIOLATION {}: {}{}{}",
            v.invariant,
            v.session
                .as_deref()
                .map(|s| format!("{s}: "))
                .unwrap_or_default(),
            v.host.map(|h| format!("host {h}: ")).unwrap_or_default(),
            v.message
        );
        sessions.extend(v.session.clone());
        hosts.extend(v.host);
    }
    let start = history
        .faults
        .first()
        .map(|f| f.start_ms)
        .unwrap_or_default();
    for id in &sessions {
        let Some(s) = history.sessions.iter().find(|s| s.view.session_id == *id) else {
            continue;
        };
        eprintln!("--- history of {id} (ms from the first fault) ---");
        if !s.notes.is_empty() {
            eprintln!("phase notes: {:?}", s.notes);
        }
        for e in &s.view.transcript {
            eprintln!("{:>9} {:<22} {}", e.at_ms - start, e.kind, e.detail);
        }
    }
    if !found.is_empty() {
        eprintln!("--- faults (ms from the first) ---");
        for f in &history.faults {
            eprintln!(
                "{:>9}..{:<9} {:<13} {}",
                f.start_ms - start,
                f.end_ms
                    .map(|e| (e - start).to_string())
                    .unwrap_or_default(),
                f.kind.name(),
                f.host
                    .map(|h| format!("host {h}"))
                    .unwrap_or_else(|| "fleet API".into())
            );
        }
    }
    for h in hosts {
        if let Some(log) = logs.get(h) {
            eprintln!("--- host {h}'s log ends ---\n{log}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::FaultRecord;

    fn report(clock_steps: bool) -> serde_json::Value {
        let step = |host| FaultRecord {
            kind: FaultKind::ClockStep,
            host: Some(host),
            start_ms: 1_000,
            end_ms: Some(21_000),
        };
        let history = History {
            faults: vec![step(0), step(2)],
            ..History::default()
        };
        let report = ChaosReport::of(&history, &[], 7, 2.0, "host", clock_steps, 130.0);
        serde_json::from_str(&report.json()).unwrap()
    }

    #[test]
    fn clock_steps_are_counted_among_the_faults() {
        let json = report(true);
        assert_eq!(json["faults"]["clock_step"], 2);
        assert_eq!(json["faults_total"], 2);
        assert_eq!(json["skipped_kinds"], serde_json::json!([]));
        assert!(!json.to_string().contains("not injected"));
    }

    #[test]
    fn a_run_without_libfaketime_says_it_skipped_them() {
        let json = report(false);
        assert_eq!(json["faults"]["clock_step"], 2);
        assert_eq!(json["skipped_kinds"], serde_json::json!(["clock_step"]));
    }
}
