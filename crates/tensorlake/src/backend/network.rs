//! Egress rules: the session's network policy mapped onto Tensorlake's
//! allow and deny lists, with the gateway always allowed, both when a
//! sandbox is created and when its policy is updated. A gateway on this
//! machine's loopback is refused unless the API is there too (the mock):
//! a real sandbox could never dial it.

use std::collections::BTreeMap;

use anyhow::anyhow;
use sandbox::{Handle, Result, SandboxError, SandboxName, SandboxSpec};
use tracing::warn;

use super::{TensorlakeBackend, map_err};
use crate::models::NetworkConfig;

/// The gateway's origin (scheme, host, port), kept with the labels so a
/// policy update keeps the gateway allowed.
pub(super) const LABEL_GATEWAY: &str = "garrison.gateway";

impl TensorlakeBackend {
    pub(super) fn network(&self, spec: &SandboxSpec) -> Result<Option<NetworkConfig>> {
        let gateway = match &spec.network.gateway_url {
            Some(url) => Some(gateway_of(url)?),
            None => None,
        };
        if let Some(g) = &gateway
            && !self.client.is_loopback()
            && is_loopback_host(&g.host)
        {
            return Err(SandboxError::Fatal(anyhow!(
                "the gateway {} is on this machine's loopback, which a Tensorlake sandbox \
                 cannot reach; serve the gateway on an address the sandbox can dial",
                g.host
            )));
        }
        let mapped = crate::policy::controls(&spec.network.policy, gateway.as_ref());
        for left_out in &mapped.unsupported {
            warn!(rule = %left_out.rule, reason = %left_out.reason, "network rule left out on Tensorlake");
        }
        let open = mapped.allow_internet_access
            && mapped.allow_out.is_empty()
            && mapped.deny_out.is_empty();
        Ok((!open).then_some(NetworkConfig {
            allow_internet_access: mapped.allow_internet_access,
            allow_out: mapped.allow_out,
            deny_out: mapped.deny_out,
        }))
    }
}

pub(super) async fn update_network_policy(
    backend: &TensorlakeBackend,
    handle: &Handle,
    policy: &common::NetworkPolicy,
) -> Result<()> {
    let spec = SandboxSpec {
        name: SandboxName::parse(&handle.name)
            .ok_or_else(|| SandboxError::Fatal(anyhow!("sandbox name {:?}", handle.name)))?,
        labels: BTreeMap::new(),
        image: None,
        restore_from: None,
        resources: Default::default(),
        network: sandbox::NetworkSpec {
            policy: policy.clone(),
            // The gateway stays allowed whatever the new policy says.
            gateway_url: handle.labels.get(LABEL_GATEWAY).cloned(),
        },
    };
    let network = backend.network(&spec)?.unwrap_or(NetworkConfig {
        allow_internet_access: true,
        ..NetworkConfig::default()
    });
    backend
        .client
        .update_network(&handle.id, &network)
        .await
        .map_err(map_err)
}

fn gateway_of(url: &str) -> Result<sandbox::policy::Gateway> {
    sandbox::policy::Gateway::from_url(url).ok_or_else(|| {
        SandboxError::Fatal(anyhow!("gateway URL {url:?} does not parse or has no host"))
    })
}

/// `scheme://host[:port]` of a gateway URL: what the policy needs, without
/// its path or query.
pub(super) fn gateway_origin(url: &str) -> Option<String> {
    let origin = url::Url::parse(url).ok()?.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
