//! Everything a chaos run stands on: the hosts' namespaces, the object
//! store, the emulator on the bridge, each host's state directory on a
//! small tmpfs (so it can be filled), its Garrison, and a poller of each
//! Garrison's readiness. Built by [`Rig::start`], torn down by
//! [`Rig::stop`] (and, as far as possible, on drop).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use emulator::{Emulator, EmulatorConfig, Faults};
use fleet::Platform;

use super::clock::FakeClock;
use super::garrison::{Garrison, Start};
use super::hosts::Hosts;
use super::store::Store;

/// Where each Garrison's admin API listens in its namespace.
const ADMIN_PORT: u16 = 9180;

/// Readiness changes of one host: (Unix ms, ready).
pub(crate) type Readiness = Arc<Mutex<Vec<(i64, bool)>>>;

/// What the rig is built with.
pub(crate) struct Setup {
    pub hosts: usize,
    pub sessions: usize,
    pub backend: &'static str,
    pub claim_ttl: Duration,
    pub faults: Faults,
    pub sim: PathBuf,
    pub s3_server: PathBuf,
    /// libfaketime, for clock steps (none: no clock steps).
    pub faketime: Option<PathBuf>,
}

/// The running rig.
pub(crate) struct Rig {
    /// The namespaces (cut by nft).
    pub hosts: Hosts,
    /// The shared bucket.
    pub store: Store,
    /// The fleet API, gateway included.
    pub emu: Emulator,
    /// One per host.
    pub garrisons: Vec<Garrison>,
    /// One per host.
    pub readiness: Vec<Readiness>,
    /// The emulator's address.
    pub fleet: SocketAddr,
    /// The outpost every host serves.
    pub outpost: String,
    pollers: Vec<tokio::task::JoinHandle<()>>,
    mounts: Vec<PathBuf>,
    /// Kept for the rig's life: logs and state directories.
    pub root: tempfile::TempDir,
}

/// Unix milliseconds, the emulator's clock.
pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Rig {
    /// Builds everything and starts every Garrison.
    pub(crate) async fn start(setup: &Setup) -> anyhow::Result<Rig> {
        let root = tempfile::Builder::new()
            .prefix("garrison-bench-chaos-")
            .tempdir()
            .context("creating a scratch directory")?;
        let hosts = Hosts::build(setup.hosts)?;
        let shared = hosts.shared_addr();
        let store = Store::start(&setup.s3_server, shared).await?;
        let emu = Emulator::start(EmulatorConfig {
            listen: (shared, 0).into(),
            claim_ttl: setup.claim_ttl,
            status_lag: Duration::from_millis(200),
            linger: Duration::from_secs(2),
            remote_binary: Some(setup.sim.clone()),
            faults: setup.faults.clone(),
            ..Default::default()
        })
        .await?;
        let fleet: SocketAddr = emu
            .base_url()
            .trim_start_matches("http://")
            .parse()
            .context("the emulator's address")?;
        let outpost = emu.create_outpost("chaos", Platform::Linux);
        let key = format!("{:016x}", rand::random::<u64>()).repeat(4);
        let mut rig = Rig {
            hosts,
            store,
            emu,
            garrisons: Vec::new(),
            readiness: Vec::new(),
            fleet,
            outpost,
            pollers: Vec::new(),
            mounts: Vec::new(),
            root,
        };
        for n in 0..setup.hosts {
            let home = rig.root.path().join(format!("host-{n}"));
            let state_dir = home.join("state");
            std::fs::create_dir_all(&state_dir)?;
            // A small file system of its own, so it can be filled up.
            let size = if setup.backend == "local" {
                "2g"
            } else {
                "256m"
            };
            let dir = state_dir.display().to_string();
            run(
                "mount",
                &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", &dir],
            )?;
            rig.mounts.push(state_dir.clone());
            if setup.backend == "local"
                && let Some(images) = std::env::var_os("GARRISON_TEST_IMAGES")
            {
                std::os::unix::fs::symlink(images, state_dir.join("images"))?;
            }
            let admin = SocketAddr::from((rig.hosts.addr(n), ADMIN_PORT));
            // A listener off loopback answers only with the admin token:
            // the bench makes it, as Garrison would on its first start.
            let token = format!("{:032x}", rand::random::<u128>());
            write_secret(&state_dir.join(orchestrator::ADMIN_TOKEN_FILE), &token)?;
            let mut env = env(&rig, &home, &key);
            // Outside the state directory, which a fault fills up.
            let clock = match &setup.faketime {
                Some(library) => {
                    let clock = FakeClock::new(&home)?;
                    env.extend(clock.env(library));
                    Some(clock)
                }
                None => None,
            };
            let garrison = Garrison::start(Start {
                prefix: rig.hosts.prefix(n),
                args: serve_args(&rig, setup, n, &state_dir, admin),
                env,
                state_dir,
                log: home.join("garrison.log"),
                clock,
            })?;
            rig.garrisons.push(garrison);
            let readiness = Readiness::default();
            rig.pollers
                .push(tokio::spawn(poll(admin, token, readiness.clone())));
            rig.readiness.push(readiness);
        }
        Ok(rig)
    }

    /// Whether host `n` was last seen ready.
    pub(crate) fn ready(&self, n: usize) -> bool {
        self.readiness[n]
            .lock()
            .expect("readiness lock")
            .last()
            .is_some_and(|(_, ready)| *ready)
    }

    /// Stops every Garrison and removes what the rig made.
    pub(crate) async fn stop(mut self) {
        for p in &self.pollers {
            p.abort();
        }
        for g in &mut self.garrisons {
            g.stop(Duration::from_secs(20)).await;
        }
        self.garrisons.clear();
        self.unmount();
    }

    fn unmount(&mut self) {
        for m in self.mounts.drain(..) {
            let _ = Command::new("umount").arg("-l").arg(&m).output();
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for p in &self.pollers {
            p.abort();
        }
        // Garrisons (and their remotes) go before their file systems.
        self.garrisons.clear();
        self.unmount();
    }
}

fn serve_args(
    rig: &Rig,
    setup: &Setup,
    n: usize,
    state_dir: &Path,
    admin: SocketAddr,
) -> Vec<String> {
    [
        "serve",
        "--outpost",
        &rig.outpost,
        "--api-url",
        &rig.emu.base_url(),
        "--static-base-url",
        &rig.emu.static_base_url(),
        "--backend",
        setup.backend,
        "--max-concurrent",
        &setup.sessions.max(1).to_string(),
        "--state-dir",
        &state_dir.display().to_string(),
        "--listen",
        &admin.to_string(),
        "--acceptor-id",
        &format!("host-{n}"),
        "--snapshot-store",
        &rig.store.url(),
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

/// The whole environment of a Garrison: secrets only here, never in argv.
fn env(rig: &Rig, home: &Path, key: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), home.display().to_string()),
        ("USER".into(), "garrison-chaos".into()),
        (
            orchestrator::settings::TOKEN_ENV.into(),
            rig.emu.account_token(),
        ),
        // No settings file of whoever runs the bench.
        (
            "GARRISON_CONFIG".into(),
            home.join("no-config").display().to_string(),
        ),
        ("RUST_LOG".into(), "info".into()),
        ("GARRISON_SNAPSHOT_KEY".into(), key.into()),
    ];
    for name in ["GARRISON_STATIC_SHIM", "GARRISON_TEST_IMAGES"] {
        if let Some(v) = std::env::var_os(name) {
            env.push((name.into(), v.to_string_lossy().into_owned()));
        }
    }
    env.extend(rig.store.env());
    env
}

fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(format!("{secret}\n").as_bytes())?;
    Ok(())
}

/// Polls `/readyz` twice a second, recording each change.
async fn poll(admin: SocketAddr, token: String, readiness: Readiness) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_default();
    let url = format!("http://{admin}/readyz");
    loop {
        let ready = http
            .get(&url)
            .bearer_auth(&token)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        {
            let mut seen = readiness.lock().expect("readiness lock");
            if seen.last().is_none_or(|(_, r)| *r != ready) {
                seen.push((now_ms(), ready));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
