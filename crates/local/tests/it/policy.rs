//! `spec.network_policy` enforced by the `local` backend's networking,
//! against the real kernel, pasta and nftables. Needs root; skips otherwise.
//!
//! No packet can leave this machine: the test builds its own world.
//!
//! - a **"host"** network namespace, made with `unshare` by the test's own
//!   thread: Garrison's side (pasta, nft, the resolvers' upstream sockets)
//!   runs there, because the tokio runtime and every command are started
//!   from that thread. Its only link is a veth pair to
//! - an **"internet"** namespace (`ip netns add`), holding test servers on
//!   TEST-NET addresses assigned inside it only: TCP and UDP echo on every
//!   address, kernel ICMP echo, and a tiny DNS server for a `.test` zone.
//!   The "host" routes everything there, and it routes nowhere else.
//!
//! The sandbox's namespace is made by `net::create` exactly as in
//! production (pasta for egress, so its flows leave from the "host").

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{AllowRule, NetworkPolicy};
use local::net::{self, NetConfig, SandboxNet};
use sandbox::SandboxName;

const ECHO_PORT: u16 = 7000;
const DNS: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 53);
const RESOLVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 53)), 53);
const CIDR_HOST: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
/// The test zone: every name has one A record on the "internet".
const ZONE: &[(&str, Ipv4Addr)] = &[
    ("allowed.test", Ipv4Addr::new(198, 51, 100, 10)),
    ("api.github.test", Ipv4Addr::new(198, 51, 100, 11)),
    ("a.b.github.test", Ipv4Addr::new(198, 51, 100, 12)),
    ("github.test", Ipv4Addr::new(198, 51, 100, 13)),
    ("evilgithub.test", Ipv4Addr::new(198, 51, 100, 14)),
    ("unlisted.test", Ipv4Addr::new(198, 51, 100, 20)),
    // A name rebound onto a private network (the server lives in the
    // test's "internet", so nothing leaves the machine).
    ("rebind.test", PRIVATE),
];
/// A private address, served in the test's "internet".
const PRIVATE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);
const TTL: u32 = 30;

fn addr_of(name: &str) -> Ipv4Addr {
    ZONE.iter().find(|(n, _)| *n == name).unwrap().1
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// Runs `f` on a thread that has joined the namespace at `path`.
fn in_netns<T: Send + 'static>(path: &Path, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = File::open(path).expect("open netns");
    std::thread::spawn(move || {
        // SAFETY: plain system call on a thread of our own.
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread")
}

/// Starts a server thread inside `path` (the thread stays there).
fn serve_in(path: &Path, f: impl FnOnce() + Send + 'static) {
    let ns = File::open(path).expect("open netns");
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        assert_eq!(
            // SAFETY: as above.
            unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        ready_tx.send(()).unwrap();
        f()
    });
    ready.recv().unwrap();
}

/// The "internet": namespace, link to the "host", addresses, servers.
struct Internet {
    name: String,
    path: PathBuf,
}

impl Internet {
    fn build() -> Self {
        let name = format!("gpolicy-inet-{}", std::process::id());
        let path = Path::new("/run/netns").join(&name);
        let _ = Command::new("ip").args(["netns", "delete", &name]).output();
        sh(&["ip", "netns", "add", &name]);
        sh(&["ip", "link", "set", "lo", "up"]);
        sh(&[
            "ip", "link", "add", "gph0", "type", "veth", "peer", "name", "gpi0", "netns", &name,
        ]);
        sh(&["ip", "address", "add", "192.0.2.2/24", "dev", "gph0"]);
        sh(&["ip", "link", "set", "gph0", "up"]);
        sh(&["ip", "route", "add", "default", "via", "192.0.2.1"]);
        let n = |args: &[&str]| {
            let mut all = vec!["ip", "-n", &name];
            all.extend_from_slice(args);
            sh(&all);
        };
        n(&["link", "set", "lo", "up"]);
        n(&["address", "add", "192.0.2.1/24", "dev", "gpi0"]);
        n(&["link", "set", "gpi0", "up"]);
        let mut addrs: Vec<Ipv4Addr> = ZONE.iter().map(|(_, a)| *a).collect();
        addrs.extend([DNS, CIDR_HOST]);
        for a in addrs {
            n(&["address", "add", &format!("{a}/32"), "dev", "lo"]);
        }
        // pasta answers the sandbox's pings with ping sockets on the "host".
        std::fs::write("/proc/sys/net/ipv4/ping_group_range", "0 2147483647").unwrap();

        serve_in(&path, || {
            let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT)).unwrap();
            for mut conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 64];
                    if let Ok(n) = conn.read(&mut buf) {
                        let _ = conn.write_all(&buf[..n]);
                    }
                });
            }
        });
        // One UDP socket per address, so each reply comes from the address
        // the request went to (a wildcard socket would answer from the
        // veth's address).
        for (_, a) in ZONE.iter().chain([&("", CIDR_HOST), &("", DNS)]) {
            let a = *a;
            serve_in(&path, move || {
                let socket = UdpSocket::bind((a, ECHO_PORT)).unwrap();
                let mut buf = [0u8; 512];
                while let Ok((n, from)) = socket.recv_from(&mut buf) {
                    let _ = socket.send_to(&buf[..n], from);
                }
            });
        }
        serve_in(&path, || {
            let socket = UdpSocket::bind((DNS, 53)).unwrap();
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                if let Some(reply) = zone_reply(&buf[..n]) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        Self { name, path }
    }
}

impl Drop for Internet {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .output();
    }
}

/// A DNS query for `name`, type A.
fn query(id: u16, name: &str) -> Vec<u8> {
    query_type(id, name, 1)
}

fn query_type(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q
}

/// The response code the sandbox's resolver gives a `qtype` query.
fn rcode(sb: &SandboxNet, name: &str, qtype: u16) -> Option<u8> {
    let name = name.to_owned();
    in_netns(&sb.netns_path, move || {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(4)))
            .unwrap();
        socket
            .send_to(&query_type(0x4243, &name, qtype), RESOLVER)
            .unwrap();
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).ok()?;
        Some(buf[..n].get(3)? & 0x0f)
    })
}

/// The question's name and the offset after the question.
fn question(msg: &[u8]) -> Option<(String, usize)> {
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos)?);
        pos += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(msg.get(pos..pos + len)?).to_lowercase());
        pos += len;
    }
    Some((labels.join("."), pos + 4))
}

/// The test zone's answer: one A record, or NXDOMAIN.
fn zone_reply(q: &[u8]) -> Option<Vec<u8>> {
    let (name, end) = question(q)?;
    let qtype = u16::from_be_bytes([q[end - 4], q[end - 3]]);
    let found = ZONE.iter().find(|(n, _)| *n == name);
    let mut r = q[..2].to_vec();
    r.push(0x81);
    r.push(if found.is_some() { 0x80 } else { 0x83 });
    let answer = found.filter(|_| qtype == 1);
    r.extend_from_slice(&[0, 1, 0, u8::from(answer.is_some()), 0, 0, 0, 0]);
    r.extend_from_slice(&q[12..end]);
    if let Some((_, a)) = answer {
        r.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        r.extend_from_slice(&TTL.to_be_bytes());
        r.extend_from_slice(&[0, 4]);
        r.extend_from_slice(&a.octets());
    }
    Some(r)
}

/// Asks the sandbox's resolver for `name`: its A record, or `None`
/// (NXDOMAIN, no answer, no reply).
fn resolve(sb: &SandboxNet, name: &str) -> Option<Ipv4Addr> {
    let name = name.to_owned();
    in_netns(&sb.netns_path, move || {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(4)))
            .unwrap();
        socket.send_to(&query(0x4242, &name), RESOLVER).unwrap();
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).ok()?;
        let r = &buf[..n];
        if r[..2] != [0x42, 0x42] || r[3] & 0x0f != 0 || r[7] == 0 {
            return None;
        }
        let (_, end) = question(r)?;
        // One A record, name compressed: 12 bytes of header before the data.
        let a: [u8; 4] = r.get(end + 12..end + 16)?.try_into().ok()?;
        Some(Ipv4Addr::from(a))
    })
}

/// TCP: connects and gets its bytes echoed (Ok), or the error kind.
fn tcp(sb: &SandboxNet, addr: SocketAddr) -> Result<(), io::ErrorKind> {
    in_netns(&sb.netns_path, move || {
        let mut conn =
            TcpStream::connect_timeout(&addr, Duration::from_secs(3)).map_err(|e| e.kind())?;
        conn.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        conn.write_all(b"ping").map_err(|e| e.kind())?;
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).map_err(|e| e.kind())?;
        assert_eq!(&buf, b"ping");
        Ok(())
    })
}

/// UDP: whether a datagram comes back echoed.
fn udp(sb: &SandboxNet, ip: Ipv4Addr) -> bool {
    in_netns(&sb.netns_path, move || {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let _ = socket.send_to(b"udp?", (ip, ECHO_PORT));
        let mut buf = [0u8; 16];
        matches!(socket.recv_from(&mut buf), Ok((4, from)) if from.ip() == IpAddr::V4(ip))
    })
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// ICMP: whether an echo request to `ip` is answered (raw socket).
fn ping(sb: &SandboxNet, ip: Ipv4Addr) -> bool {
    in_netns(&sb.netns_path, move || {
        // SAFETY: plain socket call; the fd is owned right away.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
        assert!(fd >= 0, "raw socket: {}", io::Error::last_os_error());
        // SAFETY: fd was just opened and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // A new id each time: an old echo's conntrack entry must not let
        // a new one through as "established".
        static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(1);
        let id =
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) ^ (std::process::id() as u16);
        let mut pkt = vec![8, 0, 0, 0];
        pkt.extend_from_slice(&id.to_be_bytes());
        pkt.extend_from_slice(&[0, 1]);
        pkt.extend_from_slice(b"garrison");
        let sum = checksum(&pkt);
        pkt[2..4].copy_from_slice(&sum.to_be_bytes());
        let to = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        // SAFETY: valid fd, pointers to live values of the right sizes.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            );
            libc::sendto(
                fd.as_raw_fd(),
                pkt.as_ptr() as *const libc::c_void,
                pkt.len(),
                0,
                &to as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            );
        }
        let deadline = Instant::now() + Duration::from_millis(1500);
        let mut buf = [0u8; 1500];
        while Instant::now() < deadline {
            // SAFETY: valid fd and buffer.
            let n = unsafe {
                libc::recv(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            };
            if n <= 0 {
                continue;
            }
            let p = &buf[..n as usize];
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
            if p.len() >= ihl + 8
                && p[ihl] == 0
                && src == ip
                && p[ihl + 4..ihl + 6] == id.to_be_bytes()
            {
                return true;
            }
        }
        false
    })
}

fn policy(enabled: bool, allow: Vec<AllowRule>) -> NetworkPolicy {
    NetworkPolicy { enabled, allow }
}

/// The same address is refused by TCP, UDP and ICMP.
fn assert_closed(sb: &SandboxNet, ip: Ipv4Addr, what: &str) {
    assert_eq!(
        tcp(sb, SocketAddr::from((ip, ECHO_PORT))),
        Err(io::ErrorKind::ConnectionRefused),
        "TCP to {what} ({ip})"
    );
    assert!(!udp(sb, ip), "UDP to {what} ({ip})");
    assert!(!ping(sb, ip), "ICMP to {what} ({ip})");
}

fn assert_open(sb: &SandboxNet, ip: Ipv4Addr, what: &str) {
    assert_eq!(
        tcp(sb, SocketAddr::from((ip, ECHO_PORT))),
        Ok(()),
        "TCP to {what} ({ip})"
    );
    assert!(udp(sb, ip), "UDP to {what} ({ip})");
    assert!(ping(sb, ip), "ICMP to {what} ({ip})");
}

/// Always refused: metadata, the host's loopback but the gateway port.
fn assert_always_closed(sb: &SandboxNet, gateway_port: u16, other_port: u16) {
    assert_eq!(
        tcp(sb, "169.254.169.254:80".parse().unwrap()),
        Err(io::ErrorKind::ConnectionRefused)
    );
    assert!(!ping(sb, Ipv4Addr::new(169, 254, 169, 254)));
    assert_eq!(
        tcp(sb, SocketAddr::new(sb.host_gateway, other_port)),
        Err(io::ErrorKind::ConnectionRefused),
        "host loopback"
    );
    assert_eq!(
        tcp(sb, SocketAddr::new(sb.host_gateway, gateway_port)),
        Ok(()),
        "gateway"
    );
    // The "host"'s own address.
    assert_eq!(
        tcp(sb, SocketAddr::from(([192, 0, 2, 2], gateway_port))),
        Err(io::ErrorKind::ConnectionRefused)
    );
}

fn echo_on_loopback() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 64];
            if let Ok(n) = conn.read(&mut buf) {
                let _ = conn.write_all(&buf[..n]);
            }
        }
    });
    port
}

fn world() {
    // SAFETY: affects this thread only, which is ours.
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare");
    let internet = Internet::build();
    assert!(internet.path.exists());
    // Built from this thread, so its workers live in the "host" namespace.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = NetConfig {
        run_dir: dir.path().join("net"),
        dns_upstream: Some(SocketAddr::from((DNS, 53))),
    };
    let gateway_port = echo_on_loopback();
    let other_port = echo_on_loopback();
    let name = SandboxName::for_session(&format!("policy-{}", std::process::id()));
    let first = policy(
        true,
        vec![
            AllowRule::Hostname("allowed.test".into()),
            AllowRule::Hostname("*.github.test".into()),
            AllowRule::Ipv4("203.0.113.0/24".into()),
            AllowRule::Unknown(serde_json::json!({"everything": true})),
        ],
    );
    let started = Instant::now();
    let sb = rt
        .block_on(net::create(
            &cfg,
            &name,
            Some(&format!("ws://127.0.0.1:{gateway_port}/")),
            &first,
        ))
        .unwrap();
    println!("create with an enabled policy: {:?}", started.elapsed());
    assert_eq!(sb.dns, Some(RESOLVER.ip()));

    // Before any lookup, the allowed name's address is closed: only what the
    // resolver answered is opened.
    assert_eq!(
        tcp(&sb, SocketAddr::from((addr_of("allowed.test"), ECHO_PORT))),
        Err(io::ErrorKind::ConnectionRefused)
    );
    // An allowed hostname resolves, and TCP, UDP and ICMP reach it.
    assert_eq!(resolve(&sb, "allowed.test"), Some(addr_of("allowed.test")));
    assert_open(&sb, addr_of("allowed.test"), "allowed.test");
    let set = in_netns(&sb.netns_path, || {
        Command::new("nft")
            .args(["list", "set", "inet", "garrison", "dns_v4"])
            .output()
            .unwrap()
    });
    let set = String::from_utf8_lossy(&set.stdout);
    assert!(set.contains("198.51.100.10 timeout 30s"), "{set}");
    // An allowed CIDR, no DNS involved.
    assert_open(&sb, CIDR_HOST, "203.0.113.0/24");
    // The glob: subdomains at any depth, not the apex, not a look-alike.
    for sub in ["api.github.test", "a.b.github.test"] {
        assert_eq!(resolve(&sb, sub), Some(addr_of(sub)), "{sub}");
        assert_open(&sb, addr_of(sub), sub);
    }
    for other in ["github.test", "evilgithub.test", "unlisted.test"] {
        assert_eq!(resolve(&sb, other), None, "{other} must not resolve");
        assert_closed(&sb, addr_of(other), other);
    }
    // The upstream resolver itself is not reachable directly.
    assert!(!udp(&sb, DNS));
    assert_always_closed(&sb, gateway_port, other_port);

    // A policy update in the running sandbox: another name, no CIDR.
    let second = policy(true, vec![AllowRule::Hostname("unlisted.test".into())]);
    rt.block_on(net::apply_policy(&cfg, &sb, &second)).unwrap();
    assert_eq!(resolve(&sb, "allowed.test"), None);
    assert_closed(
        &sb,
        addr_of("allowed.test"),
        "allowed.test after the update",
    );
    assert_closed(&sb, CIDR_HOST, "203.0.113.5 after the update");
    assert_eq!(
        resolve(&sb, "unlisted.test"),
        Some(addr_of("unlisted.test"))
    );
    assert_open(
        &sb,
        addr_of("unlisted.test"),
        "unlisted.test after the update",
    );
    assert_always_closed(&sb, gateway_port, other_port);

    // Enabled and empty: the gateway only.
    rt.block_on(net::apply_policy(&cfg, &sb, &policy(true, vec![])))
        .unwrap();
    assert_eq!(resolve(&sb, "unlisted.test"), None);
    assert_closed(&sb, addr_of("unlisted.test"), "unlisted.test, empty policy");
    assert_always_closed(&sb, gateway_port, other_port);

    // Disabled: open egress, names resolve, the always-on rules hold.
    rt.block_on(net::apply_policy(&cfg, &sb, &policy(false, vec![])))
        .unwrap();
    assert_eq!(
        resolve(&sb, "evilgithub.test"),
        Some(addr_of("evilgithub.test"))
    );
    assert_open(
        &sb,
        addr_of("evilgithub.test"),
        "evilgithub.test, disabled policy",
    );
    assert_open(&sb, addr_of("github.test"), "github.test, disabled policy");
    assert_always_closed(&sb, gateway_port, other_port);
    // Open egress is not the host's networks: a private address is refused
    // (TCP, UDP and ICMP), a name rebound onto one is not answered, and the
    // query types a tunnel uses are refused.
    assert_closed(&sb, PRIVATE, "a private address, disabled policy");
    assert_eq!(resolve(&sb, "rebind.test"), None);
    const REFUSED: u8 = 5;
    assert_eq!(rcode(&sb, "allowed.test", 16), Some(REFUSED), "TXT");
    assert_eq!(rcode(&sb, "allowed.test", 255), Some(REFUSED), "ANY");
    assert_eq!(rcode(&sb, "allowed.test", 1), Some(0), "A");

    // A network that covers the private ranges wholesale names none of
    // them; one inside them does, and its names resolve there.
    let wholesale = policy(true, vec![AllowRule::Ipv4("0.0.0.0/0".into())]);
    rt.block_on(net::apply_policy(&cfg, &sb, &wholesale))
        .unwrap();
    assert_open(&sb, CIDR_HOST, "203.0.113.5 under 0.0.0.0/0");
    assert_closed(&sb, PRIVATE, "a private address under 0.0.0.0/0");
    let named = policy(
        true,
        vec![
            AllowRule::Ipv4("10.0.0.0/24".into()),
            AllowRule::Hostname("rebind.test".into()),
        ],
    );
    rt.block_on(net::apply_policy(&cfg, &sb, &named)).unwrap();
    assert_open(&sb, PRIVATE, "a private network the policy names");
    assert_eq!(resolve(&sb, "rebind.test"), Some(PRIVATE));

    // "Garrison restarts": its runtime, and the resolver task with it, ends;
    // the namespace and its rules stay. Lookups fail until the resolver is
    // started again from the stored policy (the backend does it on the
    // next status poll).
    let back = policy(true, vec![AllowRule::Hostname("allowed.test".into())]);
    rt.block_on(net::apply_policy(&cfg, &sb, &back)).unwrap();
    drop(rt);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(
        resolve(&sb, "allowed.test"),
        None,
        "no resolver after the restart"
    );
    rt.block_on(net::ensure_resolver(&cfg, &sb)).unwrap();
    assert_eq!(resolve(&sb, "allowed.test"), Some(addr_of("allowed.test")));
    assert_eq!(resolve(&sb, "unlisted.test"), None);
    assert_open(&sb, addr_of("allowed.test"), "allowed.test after a restart");
    assert_closed(
        &sb,
        addr_of("unlisted.test"),
        "unlisted.test after a restart",
    );
    // A second call finds it running.
    rt.block_on(net::ensure_resolver(&cfg, &sb)).unwrap();

    rt.block_on(net::destroy(&cfg, &sb.name)).unwrap();
    assert!(!sb.netns_path.exists());
    drop(rt);
}

#[test]
fn network_policy_is_enforced_in_a_world_of_namespaces() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping: needs root (network namespaces, pasta, nftables)");
        return;
    }
    std::thread::spawn(world).join().expect("the test's world");
}
