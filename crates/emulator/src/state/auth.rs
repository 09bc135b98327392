//! Account tokens and their scopes: minting a bearer token and checking it
//! against the scopes an endpoint accepts.

use super::{State, random_hex};

/// The one account every token, outpost and connection belongs to.
pub(crate) const ACCOUNT_ID: &str = "account-emulator";

/// Scope that reads the queue and claims/releases entries.
pub const SCOPE_MACHINE: &str = "account.outposts.machine";
/// Scope that also creates, gets and deletes outposts; it implies
/// [`SCOPE_MACHINE`] (Devin's reference, "Authentication": "Creating and
/// deleting outposts (implies the machine scope)").
pub const SCOPE_ORCHESTRATOR: &str = "account.outposts.orchestrator";

/// Why an account token is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AuthError {
    Unauthorized,
    Forbidden,
}

impl State {
    pub(crate) fn mint_account_token(&mut self, scopes: &[&str]) -> String {
        let token = format!("cog_{}", random_hex(24));
        self.account_tokens.insert(
            token.clone(),
            scopes.iter().map(|s| (*s).to_owned()).collect(),
        );
        token
    }

    /// Forgets an account token: from now on it is answered 401, as a
    /// revoked or expired token is. Streams it opened stay open.
    pub(crate) fn revoke_account_token(&mut self, token: &str) -> bool {
        self.account_tokens.remove(token).is_some()
    }

    /// Checks a bearer token for any one of `scopes`, counting the
    /// orchestrator scope as the machine scope too.
    pub(crate) fn check_account_token(
        &self,
        token: &str,
        scopes: &[&str],
    ) -> Result<(), AuthError> {
        let granted = self
            .account_tokens
            .get(token)
            .ok_or(AuthError::Unauthorized)?;
        let has = |scope: &str| {
            granted.contains(scope)
                || (scope == SCOPE_MACHINE && granted.contains(SCOPE_ORCHESTRATOR))
        };
        if scopes.iter().any(|s| has(s)) {
            Ok(())
        } else {
            Err(AuthError::Forbidden)
        }
    }
}
