//! What to tell the operator when Devin refuses a connection: from the
//! browser's return (`?error=...`) or from the token exchange. Pure text
//! decisions, so each refusal's advice is unit-tested.

use fleet::pkce::ConnectError;

/// The advice for an outpost that already exists.
pub(super) const EXISTING_OUTPOST: &str = "to serve an outpost that already exists, run \
    `garrison connect --manual --outpost ID` with a token for it";

/// How a refused callback URL is fixed.
pub(super) fn callback_advice(callback_url: &str) -> String {
    format!(
        "Devin relays the code only to callback URLs on the integration's allowlist, \
         which Cognition configures: have {callback_url} registered, or pass a \
         registered one with --callback-url (or GARRISON_CONNECT_CALLBACK_URL)"
    )
}

/// The error for a refusal the browser brought back instead of a code.
pub(super) fn from_callback(error: &ConnectError, callback_url: &str) -> String {
    let (code, description) = match error {
        ConnectError::OAuth { error, description } => (error.as_str(), description.as_deref()),
        ConnectError::InvalidRequest { description } => ("invalid_request", description.as_deref()),
        ConnectError::Fleet(e) => {
            return format!(
                "the browser's return carried no code ({e}); run `garrison connect` again"
            );
        }
        other => {
            return format!("Devin refused the connection ({other}); run `garrison connect` again");
        }
    };
    let said = description.unwrap_or(code);
    let lower = said.to_ascii_lowercase();
    if code == "access_denied" {
        format!(
            "the connection was not approved in the browser ({said}); run `garrison connect` again"
        )
    } else if lower.contains("name")
        && ["taken", "exists", "in use", "already"]
            .iter()
            .any(|w| lower.contains(w))
    {
        format!(
            "Devin refused the outpost name ({said}): choose a free one with \
             --outpost-name or on the connect page; {EXISTING_OUTPOST}"
        )
    } else if lower.contains("callback") || lower.contains("redirect") {
        format!(
            "Devin refused the callback URL ({said}); {}",
            callback_advice(callback_url)
        )
    } else {
        format!("Devin refused the connection ({code}: {said}); run `garrison connect` again")
    }
}

/// The error for a refused token exchange other than `invalid_grant`
/// (which starts the flow again instead).
pub(super) fn from_exchange(error: &ConnectError, api_url: &str) -> String {
    match error {
        ConnectError::Fleet(fleet) => format!(
            "cannot exchange the code at {api_url}: {fleet}; check --api-url and this \
             machine's network, then run `garrison connect` again"
        ),
        other => format!("{api_url} refused the code: {other}; run `garrison connect` again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oauth(error: &str, description: &str) -> ConnectError {
        ConnectError::OAuth {
            error: error.into(),
            description: Some(description.into()),
        }
    }

    #[test]
    fn each_refusal_says_which_and_what_to_do() {
        let cb = "http://127.0.0.1:8791/devin/outpost-callback";
        let denied = from_callback(&oauth("access_denied", "cancelled"), cb);
        assert!(denied.contains("not approved"), "{denied}");
        let taken = from_callback(&oauth("invalid_request", "Outpost name already taken"), cb);
        assert!(taken.contains("refused the outpost name"), "{taken}");
        assert!(taken.contains("--outpost-name"), "{taken}");
        assert!(taken.contains("garrison connect --manual"), "{taken}");
        let callback = from_callback(&oauth("invalid_request", "callback_url not allowed"), cb);
        assert!(callback.contains("refused the callback URL"), "{callback}");
        assert!(
            callback.contains(cb) && callback.contains("--callback-url"),
            "{callback}"
        );
        let other = from_callback(&oauth("server_error", "oops"), cb);
        assert!(other.contains("server_error: oops"), "{other}");
    }
}
