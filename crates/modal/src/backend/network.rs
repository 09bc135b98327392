//! Network access: the session's network policy mapped onto Modal's
//! `NetworkAccess` (open, blocked, or CIDR and domain allowlists) when a
//! sandbox is created, and changed on the running sandbox through its
//! command router (`TaskSetNetworkAccess`), as Modal's client does. The
//! gateway stays allowed: its URL is kept in the sandbox's tags.

use sandbox::{Handle, Result, SandboxSpec, policy};
use tracing::warn;

use super::{ModalBackend, status_error};
use crate::wire;

/// The label (and Modal tag) that keeps the gateway URL of a sandbox, so a
/// policy changed later still allows it.
pub(super) const LABEL_GATEWAY: &str = "garrison.gateway";

impl ModalBackend {
    pub(super) fn network_access(&self, spec: &SandboxSpec) -> wire::NetworkAccess {
        let gateway = spec
            .network
            .gateway_url
            .as_deref()
            .and_then(policy::Gateway::from_url);
        let mapped = crate::policy::controls(&spec.network.policy, gateway.as_ref());
        for left_out in &mapped.unsupported {
            warn!(sandbox = %spec.name, rule = left_out.rule, reason = left_out.reason, "network rule left out on Modal");
        }
        network_access(&mapped)
    }
}

/// Modal's `NetworkAccess` for a mapped policy.
pub(super) fn network_access(mapped: &crate::policy::Controls) -> wire::NetworkAccess {
    use wire::network_access::NetworkAccessType;
    let (kind, cidrs, domains) = match (&mapped.cidr_allowlist, mapped.block_network) {
        (_, true) => (NetworkAccessType::Blocked, Vec::new(), Vec::new()),
        (Some(cidrs), false) => (
            NetworkAccessType::Allowlist,
            cidrs.clone(),
            mapped.domain_allowlist.clone(),
        ),
        (None, false) => (NetworkAccessType::Open, Vec::new(), Vec::new()),
    };
    wire::NetworkAccess {
        network_access_type: kind as i32,
        allowed_cidrs: cidrs,
        allowed_domains: domains,
    }
}

pub(super) async fn update_network_policy(
    backend: &ModalBackend,
    handle: &Handle,
    policy: &common::NetworkPolicy,
) -> Result<()> {
    let gateway = handle
        .labels
        .get(LABEL_GATEWAY)
        .and_then(|url| policy::Gateway::from_url(url));
    let mapped = crate::policy::controls(policy, gateway.as_ref());
    for left_out in &mapped.unsupported {
        warn!(sandbox = %handle.name, rule = left_out.rule, reason = left_out.reason, "network rule left out on Modal");
    }
    let request = wire::router::TaskSetNetworkAccessRequest {
        task_id: backend.handle_task(handle).await?,
        network_access: Some(network_access(&mapped)),
    };
    backend
        .client
        .routed(
            "TaskSetNetworkAccess",
            &request.task_id.clone(),
            |mut rpc| {
                let request = request.clone();
                async move { rpc.task_set_network_access(request).await }
            },
        )
        .await
        .map_err(|s| status_error("changing the sandbox's network access", s))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_access_follows_the_mapping() {
        use wire::network_access::NetworkAccessType;
        let open = network_access(&crate::policy::Controls::default());
        assert_eq!(open.network_access_type, NetworkAccessType::Open as i32);
        let blocked = network_access(&crate::policy::Controls {
            block_network: true,
            ..Default::default()
        });
        assert_eq!(
            blocked.network_access_type,
            NetworkAccessType::Blocked as i32
        );
        let listed = network_access(&crate::policy::Controls {
            cidr_allowlist: Some(vec!["203.0.113.5/32".into()]),
            ..Default::default()
        });
        assert_eq!(
            listed.network_access_type,
            NetworkAccessType::Allowlist as i32
        );
        assert_eq!(listed.allowed_cidrs, ["203.0.113.5/32"]);
    }
}
