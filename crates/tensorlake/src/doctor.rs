//! How a failed Tensorlake API call failed, for `garrison doctor`'s remedy
//! (the plug-in's [`sandbox::plugin::BackendPlugin::api_failure`]).

use sandbox::plugin::ApiFailure;

use crate::Error;

/// `None` when `error` is not a Tensorlake API error.
pub(crate) fn api_failure(error: &anyhow::Error) -> Option<ApiFailure> {
    Some(match error.downcast_ref::<Error>()? {
        Error::Transport(_) => ApiFailure::Unreachable,
        Error::Api {
            status: 401 | 403, ..
        } => ApiFailure::Refused,
        _ => ApiFailure::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_endpoint_is_not_a_missing_key() {
        let down = anyhow::Error::from(Error::Transport("connection refused".into()));
        assert_eq!(api_failure(&down), Some(ApiFailure::Unreachable));
        let refused = anyhow::Error::from(Error::Api {
            status: 401,
            code: None,
            message: "bad key".into(),
        });
        assert_eq!(api_failure(&refused), Some(ApiFailure::Refused));
        let other = anyhow::anyhow!("unexpected answer");
        assert_eq!(api_failure(&other), None);
    }
}
