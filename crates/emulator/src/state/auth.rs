//! Account tokens and their scopes: minting a bearer token and checking it
//! against the scopes an endpoint accepts.

use super::{State, random_hex};

/// Scope that reads the queue and claims/releases entries.
pub const SCOPE_MACHINE: &str = "account.outposts.machine";
/// Scope that also creates and deletes outposts.
pub const SCOPE_ORCHESTRATOR: &str = "account.outposts.orchestrator";

/// Why an account token is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AuthError {
    Unauthorized,
    Forbidden,
}

impl State {
    pub fn mint_account_token(&mut self, scopes: &[&str]) -> String {
        let token = format!("cog_{}", random_hex(24));
        self.account_tokens.insert(
            token.clone(),
            scopes.iter().map(|s| (*s).to_owned()).collect(),
        );
        token
    }

    /// Forgets an account token: from now on it is answered 401, as a
    /// revoked or expired token is. Streams it opened stay open.
    pub fn revoke_account_token(&mut self, token: &str) -> bool {
        self.account_tokens.remove(token).is_some()
    }

    /// Checks a bearer token for any one of `scopes`.
    pub fn check_account_token(&self, token: &str, scopes: &[&str]) -> Result<(), AuthError> {
        let granted = self
            .account_tokens
            .get(token)
            .ok_or(AuthError::Unauthorized)?;
        if scopes.iter().any(|s| granted.contains(*s)) {
            Ok(())
        } else {
            Err(AuthError::Forbidden)
        }
    }
}
