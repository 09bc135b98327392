//! The partner connection (Devin's "Outposts partner integrations" page):
//! the admin's approval checks the callback allowlist and that the outpost
//! name is free, then stores a single-use code bound to the PKCE challenge
//! (10-minute TTL); redeeming it creates the outpost and its service user
//! and issues a token with the machine scope only. Nothing exists before
//! the code is redeemed.

use fleet::Platform;

use super::outposts::OutpostRec;
use super::{SCOPE_MACHINE, State, random_hex};

/// What the admin confirmed on the connect page.
#[derive(Clone, Debug)]
pub(crate) struct Approval {
    pub callback_url: String,
    pub challenge: String,
    pub outpost_name: String,
    pub platform: Platform,
}

/// Why the connect page refuses the admin's confirmation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApproveError {
    /// "A URL that is not on the list is rejected."
    CallbackNotAllowed,
    /// "Devin validates ... that the outpost name is free."
    NameTaken,
}

/// Why a PKCE token exchange is refused, spelled as RFC 6749 error codes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GrantError {
    /// Unknown, expired, replayed or PKCE-mismatched code.
    InvalidGrant,
    /// The name was free at approval but taken before redemption.
    NameTaken,
}

/// What a redeemed code created.
#[derive(Clone, Debug)]
pub(crate) struct Redeemed {
    pub outpost: OutpostRec,
    pub service_user_id: String,
    pub token: String,
}

#[derive(Clone, Debug)]
pub(super) struct CodeRec {
    challenge: String,
    outpost_name: String,
    platform: Platform,
    expires_ms: i64,
}

/// Compares callback URLs as URLs (so `HTTP://127.0.0.1:1/x` is
/// `http://127.0.0.1:1/x`), else as text.
fn normalise_callback(url: &str) -> String {
    url::Url::parse(url.trim()).map_or_else(|_| url.trim().to_owned(), |u| u.to_string())
}

impl State {
    /// Puts a callback URL on the integration's allowlist.
    pub(crate) fn allow_callback(&mut self, url: &str) {
        self.callback_allowlist.insert(normalise_callback(url));
    }

    pub(crate) fn callback_allowed(&self, url: &str) -> bool {
        self.callback_allowlist.contains(&normalise_callback(url))
    }

    /// The admin clicked Connect: checks the allowlist and the name, then
    /// mints a single-use code bound to the challenge.
    pub(crate) fn approve_connection(
        &mut self,
        a: &Approval,
        now: i64,
    ) -> Result<String, ApproveError> {
        if !self.callback_allowed(&a.callback_url) {
            return Err(ApproveError::CallbackNotAllowed);
        }
        if self.outpost_by_name(&a.outpost_name).is_some() {
            return Err(ApproveError::NameTaken);
        }
        self.codes.retain(|_, c| c.expires_ms > now);
        let code = format!("code_{}", random_hex(16));
        self.codes.insert(
            code.clone(),
            CodeRec {
                challenge: a.challenge.clone(),
                outpost_name: a.outpost_name.clone(),
                platform: a.platform.clone(),
                expires_ms: now + self.timing.code_ttl_ms,
            },
        );
        Ok(code)
    }

    /// Redeems a code once; `challenge_of_verifier` is the caller's
    /// `base64url_nopad(sha256(verifier))`. Any attempt uses the code up, as
    /// a guessed verifier must not get a second try.
    pub(crate) fn redeem_code(
        &mut self,
        code: &str,
        challenge_of_verifier: &str,
        now: i64,
    ) -> Result<Redeemed, GrantError> {
        let rec = self.codes.remove(code).ok_or(GrantError::InvalidGrant)?;
        if rec.expires_ms <= now || rec.challenge != challenge_of_verifier {
            return Err(GrantError::InvalidGrant);
        }
        if self.outpost_by_name(&rec.outpost_name).is_some() {
            return Err(GrantError::NameTaken);
        }
        let id = self.create_outpost(&rec.outpost_name, rec.platform, None, now);
        let outpost = self.outpost_rec(&id).cloned().expect("just created");
        let service_user_id = format!("service-user-{}", random_hex(8));
        self.service_users
            .insert(service_user_id.clone(), outpost.id.clone());
        // "a service user scoped to run the outpost worker": the machine
        // scope, not the orchestrator scope.
        let token = self.mint_account_token(&[SCOPE_MACHINE]);
        Ok(Redeemed {
            outpost,
            service_user_id,
            token,
        })
    }
}
