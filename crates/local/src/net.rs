//! Per-sandbox network namespaces: a veth pair and kernel NAT for egress,
//! nftables for the rules. No helper process runs per sandbox.
//!
//! Each sandbox gets its own network namespace, made with `ip netns add` so
//! it is a file (`/run/netns/<name>-<tag>`) that runc joins and that
//! outlives Garrison. Then:
//!
//! - a **veth pair** (the `veth` module) links it to the host: a `/30` of
//!   `10.213.0.0/16` each, the host's end ([`SandboxNet::host_gateway`]) as
//!   the sandbox's default route. The host forwards and masquerades what
//!   the sandbox sends (the `host_rules` module: one nftables table on the
//!   host, `ip garrison_host`, and IPv4 forwarding on). Egress is IPv4 only.
//!   Nothing dials in.
//! - the host's end DNATs the gateway's one port onto the host's loopback.
//!   That is how a gateway on the host's loopback (the emulator) is
//!   reached: [`rewrite_gateway_url`] points the remote at it.
//! - an **nftables** table inside the namespace (the `rules` module has the
//!   exact ruleset) closes the rest: every other port of the host, other
//!   sandboxes, link-local and metadata addresses, the host's own
//!   addresses; then jumps to the `session_policy` chain, where
//!   [`apply_policy`] puts `spec.network_policy`: nothing for a disabled
//!   policy; for an enabled one, the allowed networks (set
//!   `allow_v4`/`allow_v6`), the addresses the resolver learned
//!   (`dns_v4`/`dns_v6`), then refuse.
//! - a **DNS resolver** (the `dns` module: a tokio task in Garrison's
//!   process, its socket on `127.0.0.53:53` inside the namespace) answers
//!   only allowed names and adds their addresses, with their TTLs, to the
//!   `dns_*` sets; the sandbox's `/etc/resolv.conf` names it
//!   ([`SandboxNet::dns`]).
//!
//! A gateway whose host is not a loopback address is reached through
//! ordinary egress. A gateway on another of the host's own addresses is
//! not reachable (they are closed to sandboxes). Listen on `127.0.0.1`
//! (the gateway path is IPv4, so not on `[::1]` alone).
//!
//! State lives in `<run_dir>/<name>/net.json`. The `<tag>` in the
//! namespace's name is a hash of `run_dir`, so two Garrisons with different
//! state directories on one host never touch each other's namespaces.
//! Calls for one sandbox must not run concurrently (the backend serializes
//! them per sandbox).
//!
//! Requirements: root, and the `nftables` and `iproute2` packages. The
//! sandbox must not hold `CAP_NET_ADMIN` (it could rewrite the rules) or
//! `CAP_NET_RAW` (a packet socket bypasses nftables).

pub use dns_budget::{QUERIES_PER_SEC, QUERY_BURST};
pub use rules::MAX_CONNECTIONS;

mod dns;
mod dns_budget;
mod enforced;
mod host_rules;
mod links;
mod pool;
mod ranges;
mod rules;
mod sysctl;
mod tools;
mod url;
mod veth;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use serde::{Deserialize, Serialize};

use self::enforced::{enforced, resolver_policy};
use self::links::non_loopback;
use self::tools::Tools;
use sandbox::{Result, SandboxError, SandboxName, format, hashed_id};

pub use self::pool::POOL;

/// Where namespaces made by `ip netns add` live.
const NETNS_DIR: &str = "/run/netns";
const STATE_FILE: &str = "net.json";
const POLICY_FILE: &str = "policy.json";

/// Where networking keeps its per-sandbox state.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// Pid files and per-sandbox state, e.g. `<state>/local/net`.
    pub run_dir: PathBuf,
    /// Where the per-sandbox resolvers send allowed queries; `None` is the
    /// first `nameserver` of the host's `/etc/resolv.conf`.
    pub dns_upstream: Option<SocketAddr>,
}

impl NetConfig {
    fn upstream(&self) -> Option<SocketAddr> {
        self.dns_upstream.or_else(|| {
            dns::upstream_from_resolv_conf(&std::fs::read_to_string("/etc/resolv.conf").ok()?)
        })
    }
}

/// A sandbox's network, as stored by the backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxNet {
    /// The [`SandboxName`].
    pub name: String,
    /// The namespace file for runc: `linux.namespaces: [{type: network, path}]`.
    pub netns_path: PathBuf,
    /// The host's end of the sandbox's link: its default route, and where
    /// it reaches the gateway's port on the host's loopback.
    pub host_gateway: IpAddr,
    /// The one port of the host's loopback the sandbox may reach: the
    /// gateway's, when the gateway URL's host is a loopback address.
    pub gateway_port: Option<u16>,
    /// The gateway's host when it is reached through ordinary egress (not
    /// on the host's loopback): always allowed, whatever the policy.
    #[serde(default)]
    pub gateway_host: Option<String>,
    /// The resolver the sandbox's `/etc/resolv.conf` must name.
    #[serde(default)]
    pub dns: Option<IpAddr>,
}

/// Makes the network for sandbox `name`: namespace, link, base ruleset,
/// then `policy` through [`apply_policy`].
///
/// A leftover of the same name (a crash between `create` and `destroy`) is
/// destroyed first, so the caller must have made sure no container still
/// uses it. On failure everything made so far is removed again.
pub async fn create(
    cfg: &NetConfig,
    name: &SandboxName,
    gateway_url: Option<&str>,
    policy: &common::NetworkPolicy,
) -> Result<SandboxNet> {
    create_owned(cfg, name, gateway_url, policy, None).await
}

/// [`create`] over `made`, when given: a network namespace made already
/// and pinned at that path (the one `userns::create` makes, owned by the
/// container's user namespace, which the kernel requires for the container
/// to mount its own `sysfs`), instead of a new one.
pub async fn create_owned(
    cfg: &NetConfig,
    name: &SandboxName,
    gateway_url: Option<&str>,
    policy: &common::NetworkPolicy,
    made: Option<&Path>,
) -> Result<SandboxNet> {
    tools::require_root()?;
    let tools = Tools::find()?;
    let gateway = gateway_url
        .map(|u| {
            url::parse_gateway(u)
                .ok_or_else(|| SandboxError::Fatal(anyhow!("gateway URL {u:?} has no host")))
        })
        .transpose()?;
    let gateway_host = gateway
        .as_ref()
        .filter(|g| !g.loopback)
        .map(|g| g.host.clone());
    let gateway_port = match gateway {
        Some(g) if g.loopback => Some(g.port.ok_or_else(|| {
            SandboxError::Fatal(anyhow!("gateway URL {gateway_url:?} has no port"))
        })?),
        _ => None,
    };
    let paths = Paths::new(cfg, name.as_str());
    if paths.state_dir.exists() || paths.netns.exists() {
        tracing::warn!(sandbox = %name, "removing a leftover network of the same name");
        destroy(cfg, name.as_str()).await?;
    }
    match build(
        &tools,
        cfg,
        &paths,
        name,
        (gateway_port, gateway_host),
        policy,
        made,
    )
    .await
    {
        Ok(net) => Ok(net),
        Err(e) => {
            if let Err(cleanup) = destroy(cfg, name.as_str()).await {
                tracing::warn!(sandbox = %name, error = %cleanup, "cleaning up a failed network");
            }
            Err(e)
        }
    }
}

async fn build(
    tools: &Tools,
    cfg: &NetConfig,
    paths: &Paths,
    name: &SandboxName,
    (gateway_port, gateway_host): (Option<u16>, Option<String>),
    policy: &common::NetworkPolicy,
    made: Option<&Path>,
) -> Result<SandboxNet> {
    mkdir_private(&cfg.run_dir)?;
    mkdir_private(&paths.state_dir)?;
    match made {
        None => {
            tools::run(&tools.ip, ["netns", "add", &paths.netns_name], None, None).await?;
        }
        Some(pinned) => {
            crate::userns::publish_network(pinned, &paths.netns_name)
                .map_err(SandboxError::Fatal)?;
        }
    }
    let (host_if, slot, host_addrs) = veth::attach(tools, &paths.netns, &paths.netns_name).await?;
    let host_gateway = slot.host_addr();
    if let Some(port) = gateway_port {
        host_rules::open_gateway(tools, &host_if, host_gateway, port).await?;
    }
    let base = rules::BaseRules {
        host_loopback: BTreeSet::from([IpAddr::V4(host_gateway)]),
        gateway_port,
        host_addrs: non_loopback(&host_addrs),
    };

    let net = SandboxNet {
        name: name.to_string(),
        netns_path: paths.netns.clone(),
        host_gateway: IpAddr::V4(host_gateway),
        gateway_port,
        gateway_host,
        dns: Some(IpAddr::V4(dns::RESOLVER_ADDR)),
    };
    let json = format::LOCAL_NETWORK
        .to_vec_pretty(&net)
        .expect("SandboxNet serializes");
    std::fs::write(paths.state_dir.join(STATE_FILE), json)
        .map_err(|e| SandboxError::Transient(anyhow!("writing network state: {e}")))?;
    // One nft call for the base rules and the policy.
    enforce(cfg, &net, policy, &rules::base_ruleset(&base)).await?;
    Ok(net)
}

/// Enforces `policy` in the sandbox's namespace, replacing the previous
/// one (atomically, so idempotent and safe on a running sandbox): the
/// allowed networks and the `session_policy` chain (see `rules`), and the
/// names the resolver answers. The gateway stays allowed whatever the
/// policy says, and the always-on rules hold either way.
///
/// Connections open when a policy narrows are not cut (the ruleset
/// accepts established flows); new ones follow the new policy.
pub async fn apply_policy(
    cfg: &NetConfig,
    net: &SandboxNet,
    policy: &common::NetworkPolicy,
) -> Result<()> {
    enforce(cfg, net, policy, "").await
}

/// [`apply_policy`], after the nft script `before` in the same transaction.
async fn enforce(
    cfg: &NetConfig,
    net: &SandboxNet,
    policy: &common::NetworkPolicy,
    before: &str,
) -> Result<()> {
    let paths = checked_paths(cfg, net)?;
    let (parsed, always) = enforced(net.gateway_host.as_deref(), policy);
    for rejected in &parsed.rejected {
        tracing::warn!(
            sandbox = %net.name,
            rule = %rejected.rule,
            reason = rejected.reason,
            "network policy rule allows nothing"
        );
    }
    let json = format::LOCAL_POLICY
        .to_vec(policy)
        .expect("policy serializes");
    std::fs::write(paths.state_dir.join(POLICY_FILE), json)
        .map_err(|e| SandboxError::Transient(anyhow!("writing the network policy: {e}")))?;
    let tools = Tools::find()?;
    let script = format!("{before}{}", rules::policy_script(&parsed, &always));
    tools::run(&tools.nft, ["-f", "-"], Some(&paths.netns), Some(&script)).await?;
    if net.dns.is_some() {
        dns::start_or_update(
            &paths.netns,
            cfg.upstream(),
            resolver_policy(net.gateway_host.as_deref(), parsed, &always),
        )?;
    }
    Ok(())
}

/// Starts the sandbox's resolver again if this process runs none (after a
/// Garrison restart), with the policy last applied. Cheap when it runs.
pub async fn ensure_resolver(cfg: &NetConfig, net: &SandboxNet) -> Result<()> {
    let paths = checked_paths(cfg, net)?;
    if net.dns.is_none() || dns::is_running(&paths.netns) {
        return Ok(());
    }
    let policy = read_policy(&paths.state_dir.join(POLICY_FILE))?;
    tracing::info!(sandbox = %net.name, "restarting the sandbox's DNS resolver");
    let (parsed, always) = enforced(net.gateway_host.as_deref(), &policy);
    dns::start_or_update(
        &paths.netns,
        cfg.upstream(),
        resolver_policy(net.gateway_host.as_deref(), parsed, &always),
    )
}

/// The policy last applied, as recorded at `path`; one that is missing or
/// does not parse allows only the gateway (fail closed), one a newer
/// Garrison wrote is refused.
fn read_policy(path: &Path) -> Result<common::NetworkPolicy> {
    let bytes = std::fs::read(path).ok();
    if let Some(bytes) = &bytes {
        format::LOCAL_POLICY
            .check(path, bytes)
            .map_err(|e| SandboxError::Fatal(e.into()))?;
    }
    Ok(bytes
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(common::NetworkPolicy {
            enabled: true,
            allow: Vec::new(),
        }))
}

/// The network recorded at `path` (the backend keeps one per sandbox):
/// `None` when it is missing or does not parse, an error when a newer
/// Garrison wrote it.
pub fn read_record(path: &Path) -> Result<Option<SandboxNet>> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(None);
    };
    format::LOCAL_NETWORK
        .check(path, &bytes)
        .map_err(|e| SandboxError::Fatal(e.into()))?;
    Ok(serde_json::from_slice(&bytes).ok())
}

fn checked_paths(cfg: &NetConfig, net: &SandboxNet) -> Result<Paths> {
    let paths = Paths::new(cfg, &net.name);
    if net.netns_path != paths.netns {
        return Err(SandboxError::Fatal(anyhow!(
            "{} is not the namespace this configuration made for {}",
            net.netns_path.display(),
            net.name
        )));
    }
    if !paths.netns.exists() {
        return Err(SandboxError::Gone(format!("network of {}", net.name)));
    }
    Ok(paths)
}

/// `url` as the sandbox must dial it: a loopback host (`127.0.0.0/8`,
/// `::1`, `localhost`) becomes [`SandboxNet::host_gateway`] (bracketed when
/// IPv6), with scheme, userinfo, port, path, query and fragment unchanged.
/// Any other URL comes back as it is.
pub fn rewrite_gateway_url(url: &str, net: &SandboxNet) -> String {
    url::rewrite(url, net.host_gateway)
}

/// Closes the gateway path, deletes the namespace (and with it the link)
/// and removes the state. A network that is already gone, or was never
/// complete, is success.
pub async fn destroy(cfg: &NetConfig, name: &str) -> Result<()> {
    let name = SandboxName::parse(name)
        .ok_or_else(|| SandboxError::Fatal(anyhow!("invalid sandbox name {name:?}")))?;
    let paths = Paths::new(cfg, name.as_str());
    dns::stop(&paths.netns);
    let tools = Tools::find()?;
    let host_if = veth::host_ifname(&paths.netns_name);
    host_rules::close_gateways(&tools, &host_if).await?;
    // The namespace's teardown would take the pair with it, but later and
    // in the background; deleting it here frees the link and its slot now.
    veth::detach(&tools, &host_if).await?;
    if paths.netns.exists()
        && let Err(e) = tools::run(
            &tools.ip,
            ["netns", "delete", &paths.netns_name],
            None,
            None,
        )
        .await
        // A concurrent destroy may have won the race.
        && paths.netns.exists()
    {
        return Err(e);
    }
    // Last, so that a destroy that failed half way is still listed.
    match std::fs::remove_dir_all(&paths.state_dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(SandboxError::Transient(
            anyhow!("removing {}: {e}", paths.state_dir.display()),
        )),
        _ => Ok(()),
    }
}

/// Names of the sandboxes with a network (or a piece of one) made with this
/// `run_dir`, sorted, for cleaning up after a crash.
pub async fn list(cfg: &NetConfig) -> Result<Vec<String>> {
    let suffix = format!("-{}", tag(cfg));
    let mut names = BTreeSet::new();
    for entry in read_dir_names(&cfg.run_dir)? {
        if SandboxName::parse(&entry).is_some() {
            names.insert(entry);
        }
    }
    for entry in read_dir_names(Path::new(NETNS_DIR))? {
        if let Some(name) = entry.strip_suffix(&suffix)
            && SandboxName::parse(name).is_some()
        {
            names.insert(name.to_owned());
        }
    }
    Ok(names.into_iter().collect())
}

/// The host-side link of sandbox `name` (for tests and measurements).
pub fn host_link(cfg: &NetConfig, name: &str) -> Result<String> {
    let name = SandboxName::parse(name)
        .ok_or_else(|| SandboxError::Fatal(anyhow!("invalid sandbox name {name:?}")))?;
    Ok(veth::host_ifname(
        &Paths::new(cfg, name.as_str()).netns_name,
    ))
}

/// The files of one sandbox's network.
struct Paths {
    netns_name: String,
    netns: PathBuf,
    state_dir: PathBuf,
}

impl Paths {
    /// `name` must be a [`SandboxName`] (checked by the public functions
    /// that take a plain string before it reaches a path).
    fn new(cfg: &NetConfig, name: &str) -> Self {
        let netns_name = format!("{name}-{}", tag(cfg));
        let state_dir = cfg.run_dir.join(name);
        Self {
            netns: Path::new(NETNS_DIR).join(&netns_name),
            netns_name,
            state_dir,
        }
    }
}

/// Eight hex digits identifying `run_dir` (its absolute form, so a relative
/// and an absolute spelling agree).
fn tag(cfg: &NetConfig) -> String {
    let dir = std::path::absolute(&cfg.run_dir).unwrap_or_else(|_| cfg.run_dir.clone());
    hashed_id(&dir.to_string_lossy())[..8].to_owned()
}

fn mkdir_private(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| SandboxError::Fatal(anyhow!("creating {}: {e}", dir.display())))
}

fn read_dir_names(dir: &Path) -> Result<Vec<String>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(SandboxError::Transient(anyhow!(
            "reading {}: {e}",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests;
