//! The PKCE authorization-code grant: single-use codes bound to a challenge
//! and an outpost, redeemed for an account token.

use super::outposts::OutpostRec;
use super::{SCOPE_MACHINE, SCOPE_ORCHESTRATOR, State, random_hex};

/// Why a PKCE token exchange is refused, spelled as RFC 6749 error codes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GrantError {
    InvalidGrant,
}

#[derive(Clone, Debug)]
pub(super) struct CodeRec {
    challenge: String,
    outpost_id: String,
    expires_ms: i64,
}

impl State {
    /// Mints a single-use authorization code bound to a PKCE challenge.
    pub fn mint_code(&mut self, challenge: &str, outpost_id: &str, now: i64) -> String {
        self.codes.retain(|_, c| c.expires_ms > now);
        let code = format!("code_{}", random_hex(16));
        self.codes.insert(
            code.clone(),
            CodeRec {
                challenge: challenge.to_owned(),
                outpost_id: outpost_id.to_owned(),
                expires_ms: now + self.timing.code_ttl_ms,
            },
        );
        code
    }

    /// Redeems a code once; `challenge_of_verifier` is the caller's
    /// `base64url_nopad(sha256(verifier))`. Any attempt uses the code up, as
    /// a guessed verifier must not get a second try.
    pub fn redeem_code(
        &mut self,
        code: &str,
        challenge_of_verifier: &str,
        now: i64,
    ) -> Result<(OutpostRec, String), GrantError> {
        let rec = self.codes.remove(code).ok_or(GrantError::InvalidGrant)?;
        if rec.expires_ms <= now || rec.challenge != challenge_of_verifier {
            return Err(GrantError::InvalidGrant);
        }
        let outpost = self
            .outpost_rec(&rec.outpost_id)
            .cloned()
            .ok_or(GrantError::InvalidGrant)?;
        let token = self.mint_account_token(&[SCOPE_MACHINE, SCOPE_ORCHESTRATOR]);
        Ok((outpost, token))
    }
}
