//! Throughput out of a sandbox, in a world of namespaces made for it (as
//! `crates/local/tests/it/policy.rs` does), so the stream cannot reach
//! anything but the sink this module starts:
//!
//! - a thread of the bench moves into a fresh network namespace, the
//!   **"host"**: a second `LocalBackend` (its own tokio runtime, built from
//!   that thread, so nft, ip and every worker live there) makes its
//!   sandboxes from it, and forwards and NATs their traffic;
//! - its only link is a veth pair to an **"internet"** namespace holding a
//!   TCP sink on [`SINK`] (TEST-NET-2), the "host"'s default route.
//!
//! A sandbox with the policy disabled and one with [`super::rules::enabled`] (whose
//! CIDR entries cover [`SINK`]) each send `--transfer-mb` of zeros with
//! bash's `/dev/tcp`, alternating; the sink times first byte -> EOF. Both take
//! the same path (sandbox -> nftables -> veth -> "host" forwarding and NAT -> veth).
//! The ruleset accepts established flows before it reaches the policy, so
//! the enabled policy's set lookups are paid by a flow's first packet only:
//! the ratio shows that an allowed stream runs at the unrestricted speed,
//! and would catch a policy that slowed every packet (a proxy, a per-packet
//! set walk), not a slower connect.

use std::fs::File;
use std::io::{self, Read};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use fleet::NetworkPolicy;
use local::{LocalBackend, LocalConfig};
use sandbox::{Resources, Sandbox};

use super::super::phases::{self, Bench};
use super::rules;
use crate::report::Summary;

/// The sink's address, inside the "internet" only.
pub(super) const SINK: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 200);
const SINK_PORT: u16 = 9000;
/// One stream, start to EOF, must finish within this (a healthy 200 MB
/// stream takes about a second).
const STREAM_GUARD: Duration = Duration::from_secs(120);

/// Per-round throughput, MB (10^6 bytes) per second, receiver side.
#[derive(Clone, Debug, Default)]
pub(crate) struct Transfer {
    pub bytes: u64,
    pub unrestricted: Vec<f64>,
    pub allowed: Vec<f64>,
}

impl Transfer {
    /// Allowed over unrestricted: the median of the rounds' ratios, each
    /// from two streams sent back to back, so a busy or quiet stretch of
    /// the machine (other work on its two cores) weighs on both sides of a
    /// pair instead of on one side's median. 0 without figures.
    pub(crate) fn ratio(&self) -> f64 {
        let ratios: Vec<f64> = self
            .allowed
            .iter()
            .zip(&self.unrestricted)
            .filter(|(_, u)| **u > 0.0)
            .map(|(a, u)| a / u)
            .collect();
        if ratios.is_empty() {
            0.0
        } else {
            Summary::of(&ratios).p50
        }
    }
}

/// What the world's sandboxes are made with.
pub(crate) struct WorldSetup {
    /// Its `root` and `snapshot_dir` must be the world's own.
    pub config: LocalConfig,
    pub resources: Resources,
    pub image: Option<String>,
    pub run_id: String,
    pub bytes: u64,
    pub rounds: usize,
}

/// Runs the streams on a thread of its own (it changes its namespace, so it
/// must not be a runtime's) and returns their figures.
pub(crate) async fn measure_throughput(setup: WorldSetup) -> anyhow::Result<Transfer> {
    let thread = std::thread::Builder::new()
        .name("bench-policy-world".into())
        .spawn(move || in_world(setup))
        .context("starting the world's thread")?;
    tokio::task::spawn_blocking(move || thread.join())
        .await?
        .map_err(|_| anyhow!("the world's thread panicked"))?
}

fn in_world(setup: WorldSetup) -> anyhow::Result<Transfer> {
    // SAFETY: one system call; it changes only this thread, which is ours
    // and ends with this function.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        bail!("unshare(CLONE_NEWNET): {}", io::Error::last_os_error());
    }
    let internet = Internet::build()?;
    let streams = (setup.rounds + 1) * 2;
    let (sink, received) = mpsc::channel();
    serve_in(&internet.path, move || run_sink(streams, &sink))?;
    // Built from this thread: its workers (and what they spawn) are in the
    // "host" namespace too.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let backend: Arc<dyn Sandbox> = Arc::new(LocalBackend::new(setup.config)?);
    let bench = |what: &str, policy: NetworkPolicy| Bench {
        backend: backend.clone(),
        resources: setup.resources,
        image: setup.image.clone(),
        run_id: format!("{}-{what}", setup.run_id),
        policy,
    };
    let unrestricted = bench("open", NetworkPolicy::default());
    let allowed = bench("allowed", rules::enabled());
    let result = rt.block_on(async {
        let open = unrestricted
            .backend
            .create(&unrestricted.spec("tx"))
            .await?;
        let allow = allowed.backend.create(&allowed.spec("tx")).await?;
        let mut transfer = Transfer {
            bytes: setup.bytes,
            ..Default::default()
        };
        // Round 0 of each is a warm-up, not counted: the first flow pays
        // for ARP on the veths and the first NAT entries, which are no
        // part of what the policy costs.
        for round in 0..=setup.rounds {
            let mut pair = [
                (&unrestricted, &open, &mut transfer.unrestricted),
                (&allowed, &allow, &mut transfer.allowed),
            ];
            // Alternate which goes first, so neither is always the one
            // right after a quiet (or a busy) moment.
            if round % 2 == 1 {
                pair.reverse();
            }
            for (bench, handle, out) in pair {
                let args = [
                    setup.bytes.to_string(),
                    SINK.to_string(),
                    SINK_PORT.to_string(),
                ];
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                // A process name is used once per sandbox.
                let name = format!("send-{round}");
                bench.sh(handle, &name, SEND_SCRIPT, &args).await?;
                let (bytes, secs) = received
                    .recv_timeout(STREAM_GUARD)
                    .map_err(|_| anyhow!("the sink saw no stream end"))??;
                ensure!(
                    bytes == setup.bytes,
                    "the sink received {bytes} bytes of {}",
                    setup.bytes
                );
                if round > 0 {
                    out.push(bytes as f64 / 1e6 / secs);
                }
            }
        }
        anyhow::Ok(transfer)
    });
    let cleaned = rt.block_on(phases::destroy_all(backend.as_ref()));
    drop(rt);
    drop(internet);
    let transfer = result?;
    cleaned.context("destroying the world's sandboxes")?;
    Ok(transfer)
}

/// `$0` bytes of zeros to `/dev/tcp/$1/$2`; bash opens the socket before
/// `cat` starts, so the sink's clock starts at the first byte, not at
/// the connect. `cat`, not `head` itself, writes to the socket: under
/// runsc a full socket answers `head`'s stdio writes with EAGAIN, which
/// the local backend's compat library turns back into a wait only for
/// programs that call write(2) themselves (see `runsc_compat.c`).
const SEND_SCRIPT: &str =
    r#"exec bash -c 'head -c "$1" /dev/zero | cat > "/dev/tcp/$2/$3"' bash "$0" "$1" "$2""#;

/// Accepts `streams` connections one after another, reporting for each the
/// bytes read and the seconds from the first byte to EOF. Bounded: gives
/// up after [`STREAM_GUARD`] without a connection or within one.
fn run_sink(streams: usize, report: &mpsc::Sender<anyhow::Result<(u64, f64)>>) {
    let result = (|| -> anyhow::Result<()> {
        let listener = TcpListener::bind((SINK, SINK_PORT))?;
        listener.set_nonblocking(true)?;
        for _ in 0..streams {
            let deadline = Instant::now() + STREAM_GUARD;
            let mut conn = loop {
                match listener.accept() {
                    Ok((conn, _)) => break conn,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        ensure!(
                            Instant::now() < deadline,
                            "no stream within {STREAM_GUARD:?}"
                        );
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            conn.set_nonblocking(false)?;
            conn.set_read_timeout(Some(STREAM_GUARD))?;
            let mut buf = vec![0u8; 1 << 20];
            let mut bytes = 0u64;
            let mut first = None;
            loop {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                first.get_or_insert_with(Instant::now);
                bytes += n as u64;
                ensure!(
                    Instant::now() < deadline,
                    "a stream outlasted {STREAM_GUARD:?}"
                );
            }
            let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
            if report.send(Ok((bytes, secs.max(1e-9)))).is_err() {
                return Ok(());
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = report.send(Err(e));
    }
}

/// The "internet": a namespace linked to the "host" (the calling thread's)
/// by a veth pair, holding [`SINK`]. Deleted on drop.
struct Internet {
    name: String,
    path: PathBuf,
}

impl Internet {
    fn build() -> anyhow::Result<Self> {
        let name = format!("gbench-inet-{}", std::process::id());
        let path = Path::new("/run/netns").join(&name);
        ip(&["netns", "add", &name])?;
        let internet = Self { name, path };
        let n = internet.name.as_str();
        // The "host" side first: these run in this thread's namespace.
        ip(&["link", "set", "lo", "up"])?;
        ip(&[
            "link", "add", "gbh0", "type", "veth", "peer", "name", "gbi0", "netns", n,
        ])?;
        ip(&["address", "add", "192.0.2.2/24", "dev", "gbh0"])?;
        ip(&["link", "set", "gbh0", "up"])?;
        // Sandboxes' traffic is forwarded along this default route.
        ip(&["route", "add", "default", "via", "192.0.2.1"])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        ip(&["-n", n, "address", "add", "192.0.2.1/24", "dev", "gbi0"])?;
        ip(&["-n", n, "link", "set", "gbi0", "up"])?;
        ip(&[
            "-n",
            n,
            "address",
            "add",
            &format!("{SINK}/32"),
            "dev",
            "lo",
        ])?;
        Ok(internet)
    }
}

impl Drop for Internet {
    fn drop(&mut self) {
        let _ = ip(&["netns", "delete", &self.name]);
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Runs `f` on a new thread that has joined the namespace at `path`.
fn serve_in(path: &Path, f: impl FnOnce() + Send + 'static) -> anyhow::Result<()> {
    let ns = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let (joined_tx, joined) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: one system call on a thread of our own.
        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        let ok = rc == 0;
        let _ = joined_tx.send(if ok {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        });
        if ok {
            f()
        }
    });
    joined
        .recv()
        .map_err(|_| anyhow!("the sink's thread ended"))?
        .context("setns into the internet namespace")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_the_median_of_back_to_back_pairs() {
        let t = Transfer {
            bytes: 1,
            // A slow stretch in round 2 hits both sides of that pair.
            unrestricted: vec![300.0, 100.0, 310.0],
            allowed: vec![290.0, 95.0, 320.0],
        };
        let r = t.ratio();
        assert!((r - 0.966).abs() < 0.001, "{r}");
        assert_eq!(Transfer::default().ratio(), 0.0);
    }
}
