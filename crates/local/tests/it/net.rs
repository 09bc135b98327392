//! The `local` backend's per-sandbox networking, against the real kernel:
//! namespaces, veth pairs, NAT and nftables. Needs root; skips otherwise.
//!
//! Traffic stays on this machine: the tests talk to listeners on the host's
//! loopback and inside namespaces they made. The one probe of an outside
//! address (169.254.169.254) is made only after checking the rule that
//! refuses it is loaded, and the refusal happens inside the namespace.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use local::net::{self, NetConfig, SandboxNet};
use sandbox::SandboxName;

fn skip_unless_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    eprintln!("skipping: needs root (network namespaces, nftables)");
    true
}

/// A unique sandbox name, so parallel tests and earlier runs never collide.
fn unique_name(test: &str) -> SandboxName {
    SandboxName::for_session(&format!(
        "{test}-{}-{:?}",
        std::process::id(),
        Instant::now()
    ))
}

fn config(dir: &tempfile::TempDir) -> NetConfig {
    NetConfig {
        run_dir: dir.path().join("net"),
        dns_upstream: None,
    }
}

/// Runs `f` on a thread that has joined the namespace at `path`. Sockets it
/// makes (and processes it spawns) belong to that namespace.
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

fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    TcpStream::connect_timeout(&addr, Duration::from_secs(3))
}

/// A listener on the host's loopback that echoes one read per connection.
fn echo_listener() -> u16 {
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

/// Connects from inside the namespace; returns the error kind (None when
/// the connection was made) and how long it took.
fn probe(net: &SandboxNet, addr: SocketAddr) -> (Option<io::ErrorKind>, Duration) {
    in_netns(&net.netns_path, move || {
        let start = Instant::now();
        let result = connect(addr).err().map(|e| e.kind());
        (result, start.elapsed())
    })
}

fn run_in_netns(net: &SandboxNet, program: &str, args: &[&str]) -> String {
    let (program, args) = (
        program.to_owned(),
        args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    );
    in_netns(&net.netns_path, move || {
        let out = Command::new(&program).args(&args).output().unwrap();
        assert!(out.status.success(), "{program} {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    })
}

/// The host's gateway paths (the NAT table's `gateways` set), as text.
fn gateway_paths() -> String {
    let out = Command::new("nft")
        .args(["list", "set", "ip", "garrison_host", "gateways"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the host has a link of that name.
fn host_link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

#[tokio::test]
async fn only_the_gateway_port_of_the_host_loopback_is_reachable() {
    if skip_unless_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir);
    let gateway_port = echo_listener();
    let other_port = echo_listener();
    let name = unique_name("gateway");
    let gateway_url = format!("ws://127.0.0.1:{gateway_port}/gateway");

    let started = Instant::now();
    let net = net::create(
        &cfg,
        &name,
        Some(&gateway_url),
        &common::NetworkPolicy::default(),
    )
    .await
    .unwrap();
    println!("create: {:?}", started.elapsed());
    assert_eq!(net.name, name.as_str());
    assert_eq!(net.gateway_port, Some(gateway_port));
    assert!(net.netns_path.exists());

    // The gateway: connects, and data goes both ways.
    let gw = net.host_gateway;
    let echoed = in_netns(&net.netns_path, move || {
        let mut conn = connect(SocketAddr::new(gw, gateway_port)).expect("gateway connects");
        conn.write_all(b"hello gateway").unwrap();
        let mut buf = [0u8; 13];
        conn.read_exact(&mut buf).unwrap();
        buf
    });
    assert_eq!(&echoed, b"hello gateway");

    // Any other port of the host's loopback: refused at once, although a
    // listener is there.
    let (err, took) = probe(&net, SocketAddr::new(gw, other_port));
    assert_eq!(err, Some(io::ErrorKind::ConnectionRefused));
    assert!(took < Duration::from_secs(1), "refusal took {took:?}");
    assert!(connect(SocketAddr::from((Ipv4Addr::LOCALHOST, other_port))).is_ok());

    // No IPv6 route out: the host's ::1 (and anything else over IPv6) is
    // out of reach.
    let routes6 = run_in_netns(&net, "ip", &["-j", "-6", "route", "show", "default"]);
    assert!(!routes6.contains("gateway"), "{routes6}");

    // The namespace's own loopback is not the host's.
    let (err, _) = probe(&net, SocketAddr::from((Ipv4Addr::LOCALHOST, gateway_port)));
    assert_eq!(err, Some(io::ErrorKind::ConnectionRefused));

    // Metadata: only probed once the refusing rule is seen loaded, so no
    // packet can leave the machine even if something else were broken.
    let set = run_in_netns(
        &net,
        "nft",
        &["list", "set", "inet", "garrison", "blocked_v4"],
    );
    assert!(set.contains("169.254.0.0/16"), "{set}");
    let (err, took) = probe(&net, "169.254.169.254:80".parse().unwrap());
    assert_eq!(err, Some(io::ErrorKind::ConnectionRefused));
    assert!(took < Duration::from_secs(1), "refusal took {took:?}");

    // The remote is told the address it can reach.
    let rewritten = net::rewrite_gateway_url(&gateway_url, &net);
    let want = match gw {
        IpAddr::V4(a) => format!("ws://{a}:{gateway_port}/gateway"),
        IpAddr::V6(a) => format!("ws://[{a}]:{gateway_port}/gateway"),
    };
    assert_eq!(rewritten, want);

    // Outbound connectivity rests on the namespace's link to the host, its
    // address and its default route through the host's end (not tested by
    // sending traffic off this machine), with no helper process at all.
    let link = net::host_link(&cfg, name.as_str()).unwrap();
    assert!(host_link_exists(&link), "{link}");
    let routes = run_in_netns(&net, "ip", &["-j", "route", "show", "default"]);
    assert!(
        routes.contains(&format!("\"gateway\":\"{gw}\"")),
        "{routes}"
    );
    let addrs = run_in_netns(
        &net,
        "ip",
        &["-j", "-4", "address", "show", "scope", "global"],
    );
    assert!(addrs.contains("\"local\":\"10.213."), "{addrs}");
    let helpers = Command::new("pgrep")
        .args(["-f", net.netns_path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(helpers.stdout.is_empty(), "a process names the namespace");

    assert_eq!(net::list(&cfg).await.unwrap(), vec![name.to_string()]);

    let started = Instant::now();
    net::destroy(&cfg, name.as_str()).await.unwrap();
    println!("destroy: {:?}", started.elapsed());
    assert!(!net.netns_path.exists());
    assert!(!host_link_exists(&link), "{link} outlived its namespace");
    assert!(
        !gateway_paths().contains(&link),
        "{link}'s gateway path is open"
    );
    assert!(net::list(&cfg).await.unwrap().is_empty());
    // Gone is success.
    net::destroy(&cfg, name.as_str()).await.unwrap();
}

/// IPv6 is off between a sandbox and the host: what the sandbox sends to
/// the host's end over IPv6 (all-nodes multicast, link-local) is dropped.
#[tokio::test]
async fn the_host_takes_in_no_ipv6_from_a_sandbox() {
    if skip_unless_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir);
    let name = unique_name("ipv6");
    let net = net::create(&cfg, &name, None, &Default::default())
        .await
        .unwrap();
    let link = net::host_link(&cfg, name.as_str()).unwrap();
    let disabled =
        std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/{link}/disable_ipv6")).unwrap();
    assert_eq!(disabled.trim(), "1");
    // A host service on every IPv6 address; the sandbox multicasts to all
    // nodes on its link, which the host's end would otherwise take in.
    let Ok(host) = std::net::UdpSocket::bind("[::]:0") else {
        eprintln!("skipping the multicast probe: no IPv6 on this host");
        net::destroy(&cfg, name.as_str()).await.unwrap();
        return;
    };
    host.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let port = host.local_addr().unwrap().port();
    let sent = in_netns(&net.netns_path, move || {
        // SAFETY: a NUL-terminated literal.
        let index = unsafe { libc::if_nametoindex(c"eth0".as_ptr()) };
        let socket = std::net::UdpSocket::bind("[::]:0").ok()?;
        let to = std::net::SocketAddrV6::new("ff02::1".parse().unwrap(), port, 0, index);
        Some(socket.send_to(b"hello host", to).is_ok())
    });
    // The send itself is refused inside the namespace (ff00::/8 is
    // internal) or leaves and is dropped by the host's end; either way
    // nothing arrives.
    println!("sent from the sandbox: {sent:?}");
    let mut buf = [0u8; 64];
    assert!(
        host.recv_from(&mut buf).is_err(),
        "the host took in the sandbox's multicast (sent: {sent:?})"
    );
    net::destroy(&cfg, name.as_str()).await.unwrap();
}

/// A sandbox that opens connections and keeps them (a leak, or an attack
/// on the host's conntrack table) gets no more than its share tracked.
#[tokio::test]
async fn a_sandbox_cannot_hold_more_than_its_share_of_connections() {
    if skip_unless_root() {
        return;
    }
    // Both ends of every connection are in this process.
    let want = u64::from(net::MAX_CONNECTIONS) * 2 + 1024;
    let limit = libc::rlimit {
        rlim_cur: want,
        rlim_max: want,
    };
    // SAFETY: a plain system call with a valid pointer.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir);
    let name = unique_name("conns");
    let gateway_url = format!("ws://127.0.0.1:{port}/gateway");
    let net = net::create(&cfg, &name, Some(&gateway_url), &Default::default())
        .await
        .unwrap();
    let gateway = SocketAddr::new(net.host_gateway, port);
    let limit = net::MAX_CONNECTIONS as usize;
    let (opened, refused_after) = in_netns(&net.netns_path, move || {
        let mut open = Vec::new();
        // Paced by retrying refusals, so the new-connection rate limit
        // delays the loop but never ends it: only the count does.
        let mut refusals_in_a_row = 0;
        while refusals_in_a_row < 100 && open.len() <= limit {
            match connect(gateway) {
                Ok(conn) => {
                    open.push(conn);
                    refusals_in_a_row = 0;
                }
                Err(_) => {
                    refusals_in_a_row += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        (open.len(), refusals_in_a_row)
    });
    assert_eq!(opened, limit, "connections held by one sandbox");
    assert_eq!(refused_after, 100);
    net::destroy(&cfg, name.as_str()).await.unwrap();
}

#[tokio::test]
async fn create_after_a_crash_replaces_the_leftover() {
    if skip_unless_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir);
    let port = echo_listener();
    let url = format!("ws://localhost:{port}/");
    let name = unique_name("crash");
    let policy = common::NetworkPolicy::default();

    let first = net::create(&cfg, &name, Some(&url), &policy).await.unwrap();

    // "Garrison restarts": nothing is torn down; a new process with the
    // same configuration finds the leftover and creates the same name again.
    let cfg_after_restart = NetConfig {
        run_dir: cfg.run_dir.clone(),
        dns_upstream: None,
    };
    assert_eq!(
        net::list(&cfg_after_restart).await.unwrap(),
        vec![name.to_string()]
    );
    let second = net::create(&cfg_after_restart, &name, Some(&url), &policy)
        .await
        .unwrap();
    assert_eq!(first.netns_path, second.netns_path);
    let (err, _) = probe(&second, SocketAddr::new(second.host_gateway, port));
    assert_eq!(err, None, "the new network works");

    // apply_policy is idempotent on a running sandbox.
    for enabled in [false, true, false] {
        let policy = common::NetworkPolicy {
            enabled,
            allow: vec![],
        };
        net::apply_policy(&cfg, &second, &policy).await.unwrap();
    }

    // A crash half way through destroy (state gone, namespace left): list
    // still finds it and destroy finishes the job.
    std::fs::remove_dir_all(cfg.run_dir.join(name.as_str())).unwrap();
    assert_eq!(net::list(&cfg).await.unwrap(), vec![name.to_string()]);
    net::destroy(&cfg, name.as_str()).await.unwrap();
    assert!(!second.netns_path.exists());
    let link = net::host_link(&cfg, name.as_str()).unwrap();
    assert!(!host_link_exists(&link));
    assert!(
        !gateway_paths().contains(&link),
        "{link}'s gateway path is open"
    );
    assert!(net::list(&cfg).await.unwrap().is_empty());
}

#[tokio::test]
async fn sandboxes_cannot_reach_each_other() {
    if skip_unless_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir);
    let policy = common::NetworkPolicy::default();
    let a = net::create(&cfg, &unique_name("iso-a"), None, &policy)
        .await
        .unwrap();
    let b = net::create(&cfg, &unique_name("iso-b"), None, &policy)
        .await
        .unwrap();
    assert_eq!(a.gateway_port, None);

    // A service in B, on every address of B.
    let listener = in_netns(&b.netns_path, || {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap()
    });
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let b_addrs: Vec<IpAddr> = run_in_netns(
        &b,
        "ip",
        &["-j", "-4", "address", "show", "scope", "global"],
    )
    .split('"')
    .filter_map(|s| s.parse().ok())
    .collect();
    assert!(!b_addrs.is_empty());

    // From A: B's addresses, loopback and the host's loopback through the
    // gateway mapping. None may reach B's listener.
    let mut targets: Vec<SocketAddr> = b_addrs
        .iter()
        .map(|&ip| SocketAddr::new(ip, port))
        .collect();
    targets.push(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    targets.push(SocketAddr::new(a.host_gateway, port));
    for target in targets {
        let _ = probe(&a, target);
        assert!(
            matches!(listener.accept(), Err(e) if e.kind() == io::ErrorKind::WouldBlock),
            "A reached B through {target}"
        );
    }
    // Nor does the host reach into B, on its loopback or B's own address.
    let _ = connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    for &ip in &b_addrs {
        let _ = TcpStream::connect_timeout(&SocketAddr::new(ip, port), Duration::from_millis(300));
    }
    assert!(matches!(listener.accept(), Err(e) if e.kind() == io::ErrorKind::WouldBlock));

    for n in [&a, &b] {
        net::destroy(&cfg, &n.name).await.unwrap();
    }
}

#[tokio::test]
async fn create_destroy_timing() {
    if skip_unless_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir);
    let policy = common::NetworkPolicy::default();
    let rounds = 5;
    let (mut create, mut destroy) = (Duration::ZERO, Duration::ZERO);
    for i in 0..rounds {
        let name = unique_name(&format!("timing-{i}"));
        let start = Instant::now();
        let net = net::create(&cfg, &name, Some("ws://127.0.0.1:1/"), &policy)
            .await
            .unwrap();
        create += start.elapsed();
        let start = Instant::now();
        net::destroy(&cfg, &net.name).await.unwrap();
        destroy += start.elapsed();
    }
    println!(
        "create {:?}, destroy {:?} (mean of {rounds})",
        create / rounds,
        destroy / rounds
    );
    let leftover: Vec<PathBuf> = net::list(&cfg)
        .await
        .unwrap()
        .iter()
        .map(PathBuf::from)
        .collect();
    assert!(leftover.is_empty(), "{leftover:?}");
}
