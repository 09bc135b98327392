//! The task command router: the per-task gRPC service Modal's clients run
//! processes through (`TaskExecStart`, `TaskExecStdioRead`, ...), reached at
//! the URL and with the JWT that `SandboxGetCommandRouterAccess` hands out.
//!
//! Modal serves it over TLS from the worker that runs the task. As Modal's
//! own client does, a plaintext `http` router URL is accepted only when the
//! API itself is on this machine (a local mock); otherwise it is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Secret;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use crate::wire::router::task_command_router_client::TaskCommandRouterClient;

/// Adds `authorization: Bearer <jwt>` to every router call.
#[derive(Clone)]
pub struct Bearer {
    value: AsciiMetadataValue,
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.value.clone());
        Ok(request)
    }
}

/// The generated router client with the task's token in front.
pub(crate) type RouterRpc = TaskCommandRouterClient<InterceptedService<Channel, Bearer>>;

/// How to reach a router URL.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// TLS with the web's root certificates.
    Tls,
    /// Plaintext: only for a router next to a local API (a mock).
    Plaintext,
}

/// Whether and how the router at `router_url` may be reached by a client of
/// the API at `api_url`: `https` always (with TLS), `http` only when the API
/// is on loopback, as Modal's client allows it for local testing.
pub(crate) fn transport(api_url: &str, router_url: &str) -> Result<Transport, String> {
    let router = url::Url::parse(router_url).map_err(|e| format!("router URL: {e}"))?;
    match router.scheme() {
        "https" => Ok(Transport::Tls),
        "http" if is_loopback_url(api_url) => Ok(Transport::Plaintext),
        "http" => Err(format!(
            "the command router URL must be https (got http, and the API at {api_url} is not on this machine)"
        )),
        other => Err(format!("the command router URL has scheme {other:?}")),
    }
}

fn is_loopback_url(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| match u.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    })
}

/// Builds a router client for `url` with `jwt`.
pub(crate) fn connect(api_url: &str, url: &str, jwt: &Secret) -> Result<RouterRpc, Status> {
    let refused = |e: String| Status::failed_precondition(e);
    let how = transport(api_url, url).map_err(refused)?;
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| refused(format!("router URL {url:?}: {e}")))?
        .connect_timeout(Duration::from_secs(20))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    if how == Transport::Tls {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_webpki_roots())
            .map_err(|e| refused(format!("TLS for the command router: {e}")))?;
    }
    let mut value = AsciiMetadataValue::try_from(format!("Bearer {}", jwt.expose()))
        .map_err(|_| refused("the router token holds characters a header cannot carry".into()))?;
    value.set_sensitive(true);
    Ok(
        TaskCommandRouterClient::with_interceptor(endpoint.connect_lazy(), Bearer { value })
            .max_decoding_message_size(16 * 1024 * 1024),
    )
}

/// Router clients by task id, so the access is fetched once per task.
#[derive(Clone, Default)]
pub(crate) struct RouterCache {
    by_task: Arc<Mutex<HashMap<String, RouterRpc>>>,
}

impl RouterCache {
    /// The client kept for `task_id`, if any.
    pub(crate) fn get(&self, task_id: &str) -> Option<RouterRpc> {
        self.by_task.lock().unwrap().get(task_id).cloned()
    }

    /// Keeps `rpc` for `task_id`.
    pub(crate) fn put(&self, task_id: &str, rpc: RouterRpc) {
        let mut by_task = self.by_task.lock().unwrap();
        // Tasks end; a long-lived orchestrator must not keep every one.
        if by_task.len() >= 1024 {
            by_task.clear();
        }
        by_task.insert(task_id.to_owned(), rpc);
    }

    /// Forgets a task's client (its token was refused: fetch a new one).
    pub(crate) fn forget(&self, task_id: &str) {
        self.by_task.lock().unwrap().remove(task_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plaintext_router_is_accepted_only_next_to_a_local_api() {
        assert_eq!(
            transport("https://api.modal.com", "https://w1.modal.host:443"),
            Ok(Transport::Tls)
        );
        assert_eq!(
            transport("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
            Ok(Transport::Plaintext)
        );
        assert_eq!(
            transport("http://localhost:9000", "http://127.0.0.1:9000"),
            Ok(Transport::Plaintext)
        );
        assert_eq!(
            transport("http://[::1]:9000", "http://[::1]:9000"),
            Ok(Transport::Plaintext)
        );
        assert!(transport("https://api.modal.com", "http://w1.modal.host").is_err());
        assert!(transport("http://10.0.0.1:9000", "http://10.0.0.1:9000").is_err());
        assert!(transport("https://api.modal.com", "ftp://w1").is_err());
    }
}
