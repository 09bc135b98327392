//! Scrubbing secrets out of text before it is logged or stored.

use std::collections::HashMap;
use std::sync::RwLock;

/// Secrets shorter than this are not scrubbed: replacing every "a" in a log
/// would make it unreadable and protect nothing.
const MIN_SECRET_LEN: usize = 8;

/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// A set of known secret values (the account token, connect tokens) that are
/// replaced wherever they appear.
///
/// Process-wide secrets stay for the process's life. A session's connect
/// tokens are kept per session: every one handed to its sandbox, and the
/// newest claim answer's (a renewal brings a fresh token, and a thousand
/// sessions renewing for days would otherwise pile up tokens that every
/// scrub goes through); [`Redactor::forget_session`] drops them when the
/// session's runner ends, as a restart would.
#[derive(Default)]
pub struct Redactor {
    inner: RwLock<Secrets>,
}

#[derive(Default)]
struct Secrets {
    global: Vec<String>,
    sessions: HashMap<String, SessionSecrets>,
    /// Every secret above once, longest first (so a secret that contains
    /// another is scrubbed whole); rebuilt on each change.
    sorted: Vec<String>,
}

#[derive(Default)]
struct SessionSecrets {
    handed_out: Vec<String>,
    newest: Option<String>,
}

impl Secrets {
    fn rebuild(&mut self) {
        let mut all: Vec<String> = self
            .global
            .iter()
            .chain(
                self.sessions
                    .values()
                    .flat_map(|s| s.handed_out.iter().chain(&s.newest)),
            )
            .cloned()
            .collect();
        all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        all.dedup();
        self.sorted = all;
    }
}

impl Redactor {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Secrets> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A secret of the whole process.
    pub fn add(&self, secret: &str) {
        if secret.len() < MIN_SECRET_LEN {
            return;
        }
        let mut secrets = self.write();
        if !secrets.global.iter().any(|s| s == secret) {
            secrets.global.push(secret.to_owned());
            secrets.rebuild();
        }
    }

    /// The connect token of a session's newest claim answer: it replaces
    /// the previous answer's, unless that one was handed out.
    pub fn add_claim_token(&self, session_id: &str, secret: &str) {
        if secret.len() < MIN_SECRET_LEN {
            return;
        }
        let mut secrets = self.write();
        let session = secrets.sessions.entry(session_id.to_owned()).or_default();
        if session.newest.as_deref() == Some(secret) {
            return;
        }
        session.newest = Some(secret.to_owned());
        secrets.rebuild();
    }

    /// A session's secret that went into its sandbox: scrubbed until the
    /// session's runner ends.
    pub fn add_handed_out(&self, session_id: &str, secret: &str) {
        if secret.len() < MIN_SECRET_LEN {
            return;
        }
        let mut secrets = self.write();
        let session = secrets.sessions.entry(session_id.to_owned()).or_default();
        if session.handed_out.iter().any(|s| s == secret) {
            return;
        }
        session.handed_out.push(secret.to_owned());
        secrets.rebuild();
    }

    /// Drops a session's secrets: its runner ended here.
    pub fn forget_session(&self, session_id: &str) {
        let mut secrets = self.write();
        if secrets.sessions.remove(session_id).is_some() {
            secrets.rebuild();
        }
    }

    /// How many distinct secrets a scrub looks for.
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .sorted
            .len()
    }

    /// Whether no secret is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `text` with every known secret replaced.
    pub fn scrub(&self, text: &str) -> String {
        let secrets = self.inner.read().unwrap_or_else(|p| p.into_inner());
        let mut out = text.to_owned();
        for secret in secrets.sorted.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrubs_every_known_secret() {
        let r = Redactor::default();
        r.add("cog_account_token_1");
        r.add("connect-token-xyz");
        r.add("short");
        let text = "a cog_account_token_1 b connect-token-xyz c short";
        assert_eq!(r.scrub(text), "a [redacted] b [redacted] c short");
    }

    #[test]
    fn a_session_keeps_its_handed_out_tokens_and_only_its_newest_answer() {
        let r = Redactor::default();
        r.add("account-token-1");
        r.add_claim_token("s1", "ct_first_token");
        r.add_handed_out("s1", "ct_first_token");
        // Renewals: each answer replaces the last unhanded one.
        for n in 0..100 {
            r.add_claim_token("s1", &format!("ct_renewal_{n:04}"));
        }
        assert_eq!(r.len(), 3, "account, handed out, newest");
        let text = "ct_first_token ct_renewal_0099 account-token-1";
        assert_eq!(r.scrub(text), "[redacted] [redacted] [redacted]");
        r.add_claim_token("s2", "ct_other_session");
        r.forget_session("s1");
        assert_eq!(r.scrub(text), "ct_first_token ct_renewal_0099 [redacted]");
        assert_eq!(r.scrub("ct_other_session"), "[redacted]");
    }
}
