//! Scrubbing secrets out of text before it is logged or stored.

use std::sync::RwLock;

/// Secrets shorter than this are not scrubbed: replacing every "a" in a log
/// would make it unreadable and protect nothing.
const MIN_SECRET_LEN: usize = 8;

pub const REDACTED: &str = "[redacted]";

/// A set of known secret values (the account token, connect tokens) that are
/// replaced wherever they appear.
#[derive(Default)]
pub struct Redactor {
    secrets: RwLock<Vec<String>>,
}

impl Redactor {
    pub fn add(&self, secret: &str) {
        if secret.len() < MIN_SECRET_LEN {
            return;
        }
        let mut secrets = self.secrets.write().unwrap_or_else(|p| p.into_inner());
        if !secrets.iter().any(|s| s == secret) {
            secrets.push(secret.to_owned());
            // Longest first, so a secret that contains another is scrubbed whole.
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    pub fn scrub(&self, text: &str) -> String {
        let secrets = self.secrets.read().unwrap_or_else(|p| p.into_inner());
        let mut out = text.to_owned();
        for secret in secrets.iter() {
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
}
