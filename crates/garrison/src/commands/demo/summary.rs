//! The demo's closing report: one row per session, then each expectation
//! with PASS or FAIL, then the count.

use std::fmt::Write;

use super::scenario::{Expectation, Tracked, step_results};
use emulator::SessionView;

/// One session's row: label, outcome, steps done of expected, time, story.
pub(super) fn session_rows(sessions: &[(&Tracked, Option<SessionView>)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<7} {:<11} {:>5}  {:>6}  WHAT IT DID",
        "SESSION", "OUTCOME", "STEPS", "TIME"
    );
    for (t, view) in sessions {
        let steps = view.as_ref().map_or(0, |v| step_results(v).len());
        let time = match t.finished {
            Some(d) => format!("{:.1}s", d.as_secs_f64()),
            None => "-".to_owned(),
        };
        let outcome = if t.finished.is_some() {
            t.stage().to_owned()
        } else {
            format!("{} (unfinished)", t.stage())
        };
        let _ = writeln!(
            out,
            "  {:<7} {:<11} {:>5}  {:>6}  {}",
            t.label(),
            outcome,
            format!("{steps}/{}", t.role.total_steps()),
            time,
            t.role.story()
        );
    }
    out
}

/// `PASS what` / `FAIL what` lines and the closing count line.
pub(super) fn expectation_lines(expectations: &[Expectation]) -> String {
    let mut out = String::new();
    for e in expectations {
        let _ = writeln!(
            out,
            "  {} {}",
            if e.passed { "PASS" } else { "FAIL" },
            e.what
        );
    }
    let passed = expectations.iter().filter(|e| e.passed).count();
    let _ = writeln!(
        out,
        "demo: {passed} passed, {} failed",
        expectations.len() - passed
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_line_is_plain() {
        let text = expectation_lines(&[
            Expectation {
                what: "a".into(),
                passed: true,
            },
            Expectation {
                what: "b".into(),
                passed: false,
            },
        ]);
        assert_eq!(text, "  PASS a\n  FAIL b\ndemo: 1 passed, 1 failed\n");
    }
}
