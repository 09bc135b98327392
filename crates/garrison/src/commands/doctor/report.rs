//! What `garrison doctor` prints: its sections as lines with a mark each,
//! or (`--json`) as one JSON document whose fields are documented on the
//! flag.

use serde_json::{Value, json};

use super::Section;
use super::check::{Check, Kind, Outcome};

/// The sections, a blank line and the verdict.
pub(super) fn text(sections: &[Section], blocking: usize) -> String {
    let mut out = String::new();
    for (title, checks) in sections {
        out.push_str(title);
        out.push('\n');
        for check in checks {
            out.push_str(&check.to_string());
            out.push('\n');
        }
    }
    out.push('\n');
    if blocking == 0 {
        out.push_str("all required checks passed\n");
    } else {
        out.push_str(&format!(
            "{blocking} required check{} failed\n",
            if blocking == 1 { "" } else { "s" }
        ));
    }
    out
}

/// `{"ok", "required_failed", "sections": [{"title", "checks": [...]}]}`.
pub(super) fn json(sections: &[Section], blocking: usize) -> Value {
    let sections: Vec<Value> = sections
        .iter()
        .map(|(title, checks)| {
            json!({
                "title": title,
                "checks": checks.iter().map(check).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "ok": blocking == 0,
        "required_failed": blocking,
        "sections": sections,
    })
}

fn check(check: &Check) -> Value {
    json!({
        "name": check.name,
        "outcome": outcome(check.outcome),
        "detail": check.detail,
        "remedy": check.remedy,
        "required": required(check),
    })
}

/// Whether a failure of the check fails the run.
fn required(check: &Check) -> bool {
    check.kind == Kind::Required
}

fn outcome(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Pass => "pass",
        Outcome::Fail => "fail",
        Outcome::Warn => "warn",
        Outcome::Info => "info",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections() -> Vec<Section> {
        vec![(
            "Backend local (configured)".to_owned(),
            vec![
                Check::pass("runc", "/usr/sbin/runc"),
                Check::fail(
                    "image",
                    "no image named default",
                    "garrison image build default",
                ),
                Check::warn("disk", "1 GiB free", "free some space").optional(),
            ],
        )]
    }

    #[test]
    fn the_text_ends_with_the_verdict() {
        let text = text(&sections(), 1);
        assert!(text.starts_with("Backend local (configured)\n  ✓ runc: /usr/sbin/runc\n"));
        assert!(text.ends_with("\n\n1 required check failed\n"), "{text}");
    }

    #[test]
    fn the_json_keeps_every_check_with_plain_field_values() {
        let value = json(&sections(), 1);
        assert_eq!(value["ok"], false);
        assert_eq!(value["required_failed"], 1);
        let checks = &value["sections"][0]["checks"];
        assert_eq!(value["sections"][0]["title"], "Backend local (configured)");
        assert_eq!(checks[0]["outcome"], "pass");
        assert_eq!(checks[0]["remedy"], Value::Null);
        assert_eq!(checks[1]["outcome"], "fail");
        assert_eq!(checks[1]["remedy"], "garrison image build default");
        assert_eq!(checks[2]["required"], false);
    }
}
