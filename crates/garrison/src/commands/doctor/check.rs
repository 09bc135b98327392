//! One line of `garrison doctor`: what was checked, how it came out, and
//! what to do about it.

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

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub outcome: Outcome,
    /// What was found, in a few words.
    pub detail: String,
    /// What to do when it is not a pass.
    pub remedy: Option<String>,
    /// A failure makes `garrison doctor` exit 1.
    pub required: bool,
}

impl Check {
    pub fn pass(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Outcome::Pass, detail, None)
    }

    pub fn fail(
        name: impl Into<String>,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Self::new(name, Outcome::Fail, detail, Some(remedy.into()))
    }

    pub fn warn(
        name: impl Into<String>,
        detail: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Self {
        Self::new(name, Outcome::Warn, detail, Some(remedy.into()))
    }

    pub fn info(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(name, Outcome::Info, detail, None)
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
            required: true,
        }
    }

    /// Marks the check as advice only: its failure does not fail the run.
    #[must_use]
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Pass
    }

    /// A required check that failed.
    pub fn is_blocking(&self) -> bool {
        self.required && self.outcome == Outcome::Fail
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
}
