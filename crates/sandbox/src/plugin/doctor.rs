//! One line of `garrison doctor`: what was checked, how it came out, and
//! what to do about it. A plug-in reports its backend's prerequisites in
//! these ([`crate::plugin::BackendPlugin::prerequisites`]), so `doctor` and
//! `demo` read every backend the same way.

use std::fmt;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Fine.
    Pass,
    /// Broken. Fails the run only when the check is required.
    Fail,
    /// Works, but something is worth a look (low disk, clock skew).
    Warn,
    /// Not checked, or nothing to check; the detail says why.
    Info,
}

/// Whether a check's failure means the thing checked cannot work. Doctor
/// fails on the required ones only, and `garrison demo` falls back from
/// the local backend for them only: the two agree on what "missing" is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Decides whether it can run (runc installed, running as root).
    Required,
    /// Worth knowing, never a failure: a fact (the runtime's version), or
    /// advice about something not configured.
    Informational,
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What was checked, in a word or two (`runc`, `disk space`).
    pub name: String,
    /// How it came out.
    pub outcome: Outcome,
    /// What was found, in a few words.
    pub detail: String,
    /// What to do when it is not a pass.
    pub remedy: Option<String>,
    /// Whether a failure makes `garrison doctor` exit 1 (see [`Kind`]).
    pub kind: Kind,
}

impl Check {
    /// A pass: `detail` says what was found.
    pub fn pass(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Outcome::Pass, detail, None)
    }

    /// A failure, with what to do about it.
    pub fn fail(
        name: impl Into<String>,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Self::new(name, Outcome::Fail, detail, Some(remedy.into()))
    }

    /// A warning, with what to do about it.
    pub fn warn(
        name: impl Into<String>,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Self::new(name, Outcome::Warn, detail, Some(remedy.into()))
    }

    /// A fact, not a verdict: informational whatever it says.
    pub fn info(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Outcome::Info, detail, None).optional()
    }

    fn new(
        name: impl Into<String>,
        outcome: Outcome,
        detail: impl Into<String>,
        remedy: Option<String>,
    ) -> Self {
        Self {
            name: name.into(),
            outcome,
            detail: detail.into(),
            remedy,
            kind: Kind::Required,
        }
    }

    /// Marks the check as advice only ([`Kind::Informational`]): its
    /// failure does not fail the run.
    #[must_use]
    pub fn optional(mut self) -> Self {
        self.kind = Kind::Informational;
        self
    }

    /// Whether it passed (for tests and reports: what decides a run is
    /// [`Check::is_blocking`]).
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Pass
    }

    /// A required check that failed: what doctor counts as a failure and
    /// the demo as a missing prerequisite.
    pub fn is_blocking(&self) -> bool {
        self.kind == Kind::Required && self.outcome == Outcome::Fail
    }
}

impl fmt::Display for Check {
    /// `✓ name: detail`, with the remedy on the next line when there is one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mark = match self.outcome {
            Outcome::Pass => "✓",
            Outcome::Fail => "✗",
            Outcome::Warn => "!",
            Outcome::Info => "-",
        };
        write!(f, "  {mark} {}: {}", self.name, self.detail)?;
        if let Some(remedy) = &self.remedy
            && self.outcome != Outcome::Pass
        {
            write!(f, "\n      -> {remedy}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_a_mark_and_the_remedy_when_not_passed() {
        let ok = Check::pass("runc", "/usr/sbin/runc");
        assert_eq!(ok.to_string(), "  ✓ runc: /usr/sbin/runc");
        let bad = Check::fail("runc", "not found", "apt-get install runc");
        assert_eq!(
            bad.to_string(),
            "  ✗ runc: not found\n      -> apt-get install runc"
        );
        assert!(bad.is_blocking());
        assert!(!bad.clone().optional().is_blocking());
        assert!(!Check::warn("disk", "1 GiB free", "free space").is_blocking());
    }

    #[test]
    fn facts_and_advice_are_informational_and_never_block() {
        let fact = Check::info("runtime", "runc version 1.1.5: namespaces, cgroups");
        assert_eq!(fact.kind, Kind::Informational);
        assert!(!fact.is_blocking());
        let advice = Check::fail("runc", "not found", "apt-get install runc").optional();
        assert_eq!(advice.kind, Kind::Informational);
        assert!(!advice.is_blocking());
        assert_eq!(Check::pass("root", "running as root").kind, Kind::Required);
    }
}
