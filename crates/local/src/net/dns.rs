//! The per-sandbox DNS resolver that makes hostname rules work for any
//! TCP/UDP client.
//!
//! One tokio task per sandbox, inside Garrison's process (no helper process,
//! so no extra memory per sandbox beyond a socket and a task). Its socket is
//! bound to [`RESOLVER_ADDR`] *inside the sandbox's namespace* (made on a
//! short-lived thread that joined the namespace), so only that sandbox can
//! reach it; the sandbox's `/etc/resolv.conf` names it. Upstream queries go
//! out from Garrison's own namespace to the configured upstream (default:
//! the host's first `nameserver`).
//!
//! A query for a name the policy allows (or any name, when the policy is
//! disabled) is forwarded as it is; before the answer is passed back, its
//! A/AAAA addresses are added to the namespace's `dns_v4`/`dns_v6` nftables
//! sets with a timeout equal to their TTL (bounded, and the client is told
//! the bounded TTL), so the client's connection that follows is accepted.
//! Any other name gets NXDOMAIN and its addresses stay refused. Only the
//! query types resolution needs are served (TXT, ANY and the rest are
//! refused: they are how data is tunnelled through a resolver). An answer
//! with an address in a refused range (private, loopback, link-local,
//! metadata; see `ranges`) that the policy does not name is refused whole,
//! so a name cannot be rebound onto the host's networks; the gateway's own
//! name is exempt. Only UDP is served (a truncated answer makes a client
//! retry over TCP, which is refused: rare for the A/AAAA answers that
//! matter).
//!
//! What lookups cost the host is bounded by `dns_budget`: each sandbox's
//! resolver reads at most [`QUERIES_PER_SEC`] queries a second, with bursts
//! of [`QUERY_BURST`], so no more reach the upstream or come back from it.
//! Over that budget the resolver stops reading its socket until a token
//! returns, rather than answering REFUSED or SERVFAIL: an answer would
//! still cost Garrison a receive, a parse and a send per query, and tell a
//! client to give up at once; unread, the queries wait in the socket's
//! receive buffer, and what overflows it is dropped by the kernel, at no
//! cost to Garrison. A client that waits is slowed to the budget (its
//! resolver retries after a timeout); a flood costs Garrison 100 queries a
//! second, as a quiet sandbox would.
//!
//! Messages are parsed by the small bounded parser of `dns/message.rs` (a
//! query is at most 512 bytes, an answer at most 4096; names are walked
//! with a bounded number of labels and compression pointers), not by a DNS
//! library.
//!
//! Restarts: the task dies with Garrison; the namespace, its rules and the
//! sets stay. The policy is stored next to the network's state
//! (`policy.json`), and [`super::ensure_resolver`] starts the resolver again
//! from it; the local backend calls it on every status poll of a
//! sandbox, so after a restart names resolve again within one poll. Until
//! then the sandbox's lookups time out (fail closed); addresses already
//! learned stay reachable until their TTL ends.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::Duration;

use anyhow::anyhow;
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;

use super::dns_budget::{self, Budget, QUERIES_PER_SEC, QUERY_BURST, TokenBucket};
use message::{
    MAX_ANSWER, MAX_QUERY, RCODE_NXDOMAIN, RCODE_REFUSED, RCODE_SERVFAIL, TYPE_A, TYPE_AAAA,
    TYPE_CNAME, TYPE_HTTPS, TYPE_SVCB, answer_addresses, cap_ttls, error_reply, parse_query,
};

mod message;
use super::rules;
use super::tools::{self, Tools};
use sandbox::policy::{Cidr, Parsed};
use sandbox::{Result, SandboxError};

/// Where the resolver listens inside each sandbox's namespace (its own
/// loopback, which the ruleset accepts before any policy).
pub(super) const RESOLVER_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 53);
const PORT: u16 = 53;
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// Queries in flight per sandbox; more are dropped (the client retries).
const MAX_IN_FLIGHT: usize = 32;
/// Datagrams read from the upstream's socket per query before giving up on
/// it: the answer, and a few that are not (a late answer to nothing, junk).
const MAX_UPSTREAM_DATAGRAMS: usize = 8;

/// What the resolver answers for: the policy as enforced, the networks
/// inside internal ranges it names, and the gateway's name.
#[derive(Clone, Debug, Default)]
pub(crate) struct ResolverPolicy {
    pub parsed: Parsed,
    /// Networks inside internal ranges the policy or the gateway names
    /// (see `ranges::named_internal`).
    pub named_internal: Vec<Cidr>,
    /// The gateway's host name, whose internal addresses are let through.
    pub gateway_name: Option<String>,
}

struct Running {
    policy: Arc<RwLock<ResolverPolicy>>,
    task: tokio::task::JoinHandle<()>,
}

/// Resolvers of this process, by namespace path.
static RESOLVERS: LazyLock<Mutex<HashMap<PathBuf, Running>>> = LazyLock::new(Default::default);

/// Starts the resolver of the namespace at `netns`, or gives a running one
/// the new `policy`.
pub(crate) fn start_or_update(
    netns: &Path,
    upstream: Option<SocketAddr>,
    policy: ResolverPolicy,
) -> Result<()> {
    let mut all = RESOLVERS.lock().expect("resolver registry");
    if let Some(running) = all.get(netns)
        && !running.task.is_finished()
    {
        *running.policy.write().expect("resolver policy") = policy;
        return Ok(());
    }
    let socket = bind_in(netns)?;
    let policy = Arc::new(RwLock::new(policy));
    let task = tokio::spawn(serve(
        socket,
        netns.to_owned(),
        upstream,
        Arc::clone(&policy),
    ));
    all.insert(netns.to_owned(), Running { policy, task });
    Ok(())
}

/// Whether a resolver of this process serves `netns`.
pub(crate) fn is_running(netns: &Path) -> bool {
    let all = RESOLVERS.lock().expect("resolver registry");
    all.get(netns).is_some_and(|r| !r.task.is_finished())
}

/// Stops the resolver of `netns`, if any.
pub(crate) fn stop(netns: &Path) {
    if let Some(running) = RESOLVERS.lock().expect("resolver registry").remove(netns) {
        running.task.abort();
    }
}

/// A UDP socket on [`RESOLVER_ADDR`] inside the namespace at `netns`.
fn bind_in(netns: &Path) -> Result<UdpSocket> {
    let ns = std::fs::File::open(netns).map_err(|e| {
        SandboxError::Transient(anyhow!(
            "opening network namespace {}: {e}",
            netns.display()
        ))
    })?;
    let socket = std::thread::spawn(move || -> std::io::Result<std::net::UdpSocket> {
        // SAFETY: one system call on a thread of our own, which ends here.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let socket = std::net::UdpSocket::bind((RESOLVER_ADDR, PORT))?;
        socket.set_nonblocking(true)?;
        Ok(socket)
    })
    .join()
    .map_err(|_| SandboxError::Fatal(anyhow!("the resolver's bind thread panicked")))?
    .map_err(|e| {
        SandboxError::Transient(anyhow!(
            "binding the DNS resolver in {}: {e}",
            netns.display()
        ))
    })?;
    UdpSocket::from_std(socket)
        .map_err(|e| SandboxError::Transient(anyhow!("registering the DNS socket: {e}")))
}

async fn serve(
    socket: UdpSocket,
    netns: PathBuf,
    upstream: Option<SocketAddr>,
    policy: Arc<RwLock<ResolverPolicy>>,
) {
    let socket = Arc::new(socket);
    let budget = Arc::new(Mutex::new(Budget::new(std::time::Instant::now())));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut queries = TokenBucket::new(QUERIES_PER_SEC, QUERY_BURST, std::time::Instant::now());
    let mut buf = vec![0u8; MAX_QUERY];
    // When the last "over budget" warning was logged: one a minute at most.
    let mut warned: Option<std::time::Instant> = None;
    loop {
        let (n, client) = match socket.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(e) => {
                tracing::warn!(netns = %netns.display(), error = %e, "DNS resolver receive");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over budget: nothing more is read until a token returns (see the
        // module's doc); this query waits for it.
        while let Err(wait) = queries.take(std::time::Instant::now()) {
            let now = std::time::Instant::now();
            if warned.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(60)) {
                warned = Some(now);
                tracing::warn!(
                    netns = %netns.display(),
                    per_second = QUERIES_PER_SEC,
                    burst = QUERY_BURST,
                    "DNS: the sandbox asks more than its budget; its queries are slowed to it"
                );
            }
            tokio::time::sleep(wait).await;
        }
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            continue;
        };
        let query = buf[..n].to_vec();
        let (socket, netns, policy) = (Arc::clone(&socket), netns.clone(), Arc::clone(&policy));
        let budget = Arc::clone(&budget);
        tokio::spawn(async move {
            let _permit = permit;
            if let Some(reply) = answer(&query, &policy, &budget, &netns, upstream).await {
                let _ = socket.send_to(&reply, client).await;
            }
        });
    }
}

/// The reply to `query` (none for a message that is not a query).
async fn answer(
    query: &[u8],
    policy: &RwLock<ResolverPolicy>,
    budget: &Mutex<Budget>,
    netns: &Path,
    upstream: Option<SocketAddr>,
) -> Option<Vec<u8>> {
    let q = parse_query(query)?;
    if !serves_type(q.qtype) {
        tracing::debug!(netns = %netns.display(), name = %q.name, qtype = q.qtype, "DNS: refused query type");
        return Some(error_reply(query, &q, RCODE_REFUSED));
    }
    let policy = policy.read().expect("resolver policy").clone();
    if !policy.parsed.allows_name(&q.name) {
        tracing::debug!(netns = %netns.display(), name = %q.name, "DNS: refused name");
        return Some(error_reply(query, &q, RCODE_NXDOMAIN));
    }
    let Some(mut reply) = forward(query, upstream).await else {
        return Some(error_reply(query, &q, RCODE_SERVFAIL));
    };
    let answers: Vec<(IpAddr, u32)> = answer_addresses(&reply)
        .unwrap_or_default()
        .into_iter()
        .map(|(ip, ttl)| (ip, dns_budget::bounded_ttl(ttl)))
        .collect();
    let mut script = String::new();
    match screen(&answers, &policy, &q.name) {
        Screened::Refused(ip) => {
            tracing::info!(netns = %netns.display(), name = %q.name, %ip, "DNS: an answer in a refused range was dropped");
            return Some(error_reply(query, &q, RCODE_REFUSED));
        }
        Screened::GatewayInternal(addrs) => {
            script.extend(rules::named_internal_script(&addrs));
        }
        Screened::Clean => {}
    }
    if !policy.parsed.open {
        let admitted = budget
            .lock()
            .expect("resolver budget")
            .admit(std::time::Instant::now(), &answers);
        match admitted {
            Ok(needed) => script.extend(rules::dns_elements_script(&needed)),
            Err(refusal) => {
                tracing::warn!(
                    netns = %netns.display(),
                    name = %q.name,
                    refusal = match refusal {
                        super::dns_budget::Refusal::RateLimited => "rate_limited",
                        super::dns_budget::Refusal::Full => "full",
                    },
                    "DNS: not learning more addresses"
                );
                return Some(error_reply(query, &q, RCODE_SERVFAIL));
            }
        }
    }
    if !script.is_empty() {
        let added = match Tools::find() {
            Ok(t) => tools::run(&t.nft, ["-f", "-"], Some(netns), Some(&script))
                .await
                .map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = added {
            tracing::warn!(netns = %netns.display(), error = %e, "DNS: adding answers to the allow set");
            return Some(error_reply(query, &q, RCODE_SERVFAIL));
        }
    }
    cap_ttls(&mut reply, dns_budget::MAX_TTL_SECS);
    Some(reply)
}

/// The query types resolution needs.
fn serves_type(qtype: u16) -> bool {
    matches!(
        qtype,
        TYPE_A | TYPE_AAAA | TYPE_CNAME | TYPE_SVCB | TYPE_HTTPS
    )
}

/// What an answer's addresses allow.
#[derive(Debug, PartialEq, Eq)]
enum Screened {
    /// Nothing refused.
    Clean,
    /// The gateway's name, at these internal addresses: let through.
    GatewayInternal(Vec<IpAddr>),
    /// This address is in a refused range the policy does not name.
    Refused(IpAddr),
}

fn screen(answers: &[(IpAddr, u32)], policy: &ResolverPolicy, name: &str) -> Screened {
    let refused: Vec<IpAddr> = answers
        .iter()
        .map(|(ip, _)| *ip)
        .filter(|ip| super::ranges::refused_answer(*ip, &policy.named_internal))
        .collect();
    let Some(first) = refused.first() else {
        return Screened::Clean;
    };
    let gateway = policy.gateway_name.as_deref() == Some(name);
    let never = |ip: &IpAddr| {
        super::ranges::always_blocked()
            .iter()
            .any(|c| c.contains(*ip))
    };
    if gateway && !refused.iter().any(never) {
        Screened::GatewayInternal(refused)
    } else {
        Screened::Refused(*first)
    }
}

/// The upstream's answer to `query`; none without an upstream, on a
/// timeout or an error.
async fn forward(query: &[u8], upstream: Option<SocketAddr>) -> Option<Vec<u8>> {
    let upstream = upstream?;
    let local: SocketAddr = if upstream.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let socket = UdpSocket::bind(local).await.ok()?;
    socket.connect(upstream).await.ok()?;
    socket.send(query).await.ok()?;
    let mut buf = vec![0u8; MAX_ANSWER];
    let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
    for _ in 0..MAX_UPSTREAM_DATAGRAMS {
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .ok()?
            .ok()?;
        // Same id, a response: anything else is ignored.
        if n >= 12 && buf[..2] == query[..2] && buf[2] & 0x80 != 0 {
            buf.truncate(n);
            return Some(buf);
        }
    }
    None
}

/// The first `nameserver` of a resolv.conf, on port 53.
pub(crate) fn upstream_from_resolv_conf(text: &str) -> Option<SocketAddr> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, PORT))
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_types_resolution_needs_are_served() {
        for t in [TYPE_A, TYPE_AAAA, TYPE_CNAME, TYPE_HTTPS, TYPE_SVCB] {
            assert!(serves_type(t), "{t}");
        }
        // TXT, ANY, NULL, MX: the usual tunnels.
        for t in [16, 255, 10, 15] {
            assert!(!serves_type(t), "{t}");
        }
    }

    fn resolver_policy(named: &[&str], gateway: Option<&str>) -> ResolverPolicy {
        ResolverPolicy {
            parsed: Parsed::default(),
            named_internal: named
                .iter()
                .map(|n| Cidr::parse(n, false).unwrap())
                .collect(),
            gateway_name: gateway.map(str::to_owned),
        }
    }

    #[test]
    fn rebinding_onto_internal_addresses_is_refused_unless_named_or_the_gateway() {
        let public = ("198.51.100.10".parse().unwrap(), 60);
        let private = ("10.0.0.5".parse().unwrap(), 60);
        let metadata = ("169.254.169.254".parse().unwrap(), 60);
        let p = resolver_policy(&[], Some("gw.corp"));
        assert_eq!(screen(&[public], &p, "a.test"), Screened::Clean);
        assert_eq!(
            screen(&[public, private], &p, "a.test"),
            Screened::Refused(private.0)
        );
        assert_eq!(
            screen(&[private], &p, "gw.corp"),
            Screened::GatewayInternal(vec![private.0])
        );
        assert_eq!(
            screen(&[metadata], &p, "gw.corp"),
            Screened::Refused(metadata.0)
        );
        let named = resolver_policy(&["10.0.0.0/24"], None);
        assert_eq!(screen(&[private], &named, "a.test"), Screened::Clean);
    }

    #[test]
    fn upstream_comes_from_resolv_conf() {
        let conf = "# c\nsearch x\nnameserver fe80::1%eth0\nnameserver 10.0.0.2\n";
        assert_eq!(
            upstream_from_resolv_conf(conf),
            Some("[fe80::1]:53".parse().unwrap())
        );
        assert_eq!(
            upstream_from_resolv_conf("nameserver 10.0.0.2"),
            Some("10.0.0.2:53".parse().unwrap())
        );
        assert_eq!(upstream_from_resolv_conf(""), None);
    }
}
