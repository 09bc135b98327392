//! How a failed Modal API call failed, for `garrison doctor`'s remedy (the
//! plug-in's [`sandbox::plugin::BackendPlugin::api_failure`]).

use sandbox::plugin::ApiFailure;

/// Modal's gRPC status, as the backend words it ("Modal said
/// Unauthenticated: ..."); `None` when the text names none of those.
pub(crate) fn api_failure(error: &anyhow::Error) -> Option<ApiFailure> {
    let text = format!("{error:#}");
    if text.contains("Unauthenticated") || text.contains("PermissionDenied") {
        return Some(ApiFailure::Refused);
    }
    if text.contains("Unavailable") || text.contains("DeadlineExceeded") {
        return Some(ApiFailure::Unreachable);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modal_statuses_name_what_failed() {
        let refused = anyhow::anyhow!("listing: Modal said Unauthenticated: no");
        assert_eq!(api_failure(&refused), Some(ApiFailure::Refused));
        let down = anyhow::anyhow!("listing: Modal said Unavailable: try later");
        assert_eq!(api_failure(&down), Some(ApiFailure::Unreachable));
        assert_eq!(api_failure(&anyhow::anyhow!("unexpected answer")), None);
    }
}
