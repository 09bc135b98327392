//! `garrison bench sandbox`: what one sandbox costs, measured on the backend
//! directly (no emulator, no orchestrator loop).
//!
//! 1. **Create -> remote started**, `--sessions` times, one sandbox after
//!    another, each left running: `create`, `put_file` of the ~10 MB static
//!    `devin-remote-sim` (as the session runner copies the verified remote
//!    in), `spawn` of `sh -c 'devin-remote --version; exec sleep infinity'`,
//!    then polling until the remote's first output line can be read back
//!    and the process's status is Running. The headline is the whole span:
//!    create called -> that line read. Spawn returning (the shim has
//!    started the process) is in the breakdown.
//! 2. **Memory** of those idle sandboxes: every helper process outside a
//!    sandbox that works for it (see `procs`), resident size by name.
//! 3. **Destroy** of each, with its process still running.
//! 4. **Snapshot and restore** of a workspace of `--files` files of
//!    `--file-kb` KiB of random data, generated inside the sandbox by one
//!    `head -c /dev/urandom | split` per directory (incompressible, so zstd
//!    cannot shrink the work): `snapshot` and `create` with `restore_from`
//!    each `--rounds` times, then the restored files counted inside.
//! 5. **Network policy** (`--policy`, on by default with the local backend;
//!    see `policy`): create -> remote started with an enabled policy of 50
//!    allow entries against a disabled one, `--policy-sandboxes` of each;
//!    then one TCP stream of `--transfer-mb` out of a sandbox, allowed by
//!    the policy and unrestricted, `--rounds` each, to a sink in a private
//!    world of network namespaces.
//! 6. **Peer** (`--peer podman`; see `peer`): the start and the removal of
//!    step 1 and 3 done by Podman with the same image, limits and command,
//!    so Garrison's figures are also given as ratios to Podman's.
//! 7. **Workload** (`--workload-files`; see `workload`): `git status` on a
//!    repository made inside a sandbox, a syscall-heavy task, `--rounds`
//!    times.
//!
//! `--runtime runsc` runs every sandbox of the local backend on gVisor
//! instead of runc; run the bench once per runtime to compare them.
//!
//! Everything lives in a scratch directory under the state directory, which
//! is removed at the end (every sandbox in it is destroyed first, also after
//! a failure). Images come from `--images-dir` and are only read.

mod figures;
mod peer;
mod phases;
mod policy;
mod procs;
mod report;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use host::{HostBackend, HostConfig};
use local::images::{DEFAULT_IMAGE, ImageStore};
use local::{LocalBackend, LocalConfig, Runtime};
use sandbox::{Resources, Sandbox};

use self::figures::Setup;
use self::report::Report;

/// Options of `garrison bench sandbox`.
#[derive(Args, Debug)]
pub struct SandboxArgs {
    /// The backend to measure.
    #[arg(long, value_enum, default_value_t = BackendChoice::Local)]
    backend: BackendChoice,
    /// Sandboxes created (and destroyed) for the latency figures; all of
    /// them are idle at once for the memory figure.
    #[arg(long, default_value_t = 50)]
    sessions: usize,
    /// CPUs per sandbox.
    #[arg(long, default_value_t = 1.0)]
    cpus: f64,
    /// Memory per sandbox, MB.
    #[arg(long, default_value_t = 1024)]
    memory_mb: u64,
    /// Disk per sandbox, MB.
    #[arg(long, default_value_t = 2048)]
    disk_mb: u64,
    /// Garrison's state directory: the scratch directory goes in it
    /// [default: /var/lib/garrison as root, else ~/.local/share/garrison].
    #[arg(long, env = "GARRISON_HOME", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The local backend's image store [default: <state-dir>/images].
    #[arg(long, value_name = "DIR")]
    images_dir: Option<PathBuf>,
    /// The image sandboxes start from (local backend).
    #[arg(long, default_value = DEFAULT_IMAGE)]
    image: String,
    /// Files in the snapshot workspace.
    #[arg(long, default_value_t = 20_000)]
    files: u64,
    /// Size of each of them, KiB.
    #[arg(long, default_value_t = 10)]
    file_kb: u64,
    /// Snapshots taken, and restores made, of that workspace.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Measure the network policy's cost (start latency, throughput)
    /// [default: true with the local backend, which alone enforces it].
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    policy: Option<bool>,
    /// Sandboxes created with each policy for its start latency.
    #[arg(long, default_value_t = 20)]
    policy_sandboxes: usize,
    /// MB (10^6 bytes) sent per stream for the policy's throughput.
    #[arg(long, default_value_t = 200)]
    transfer_mb: u64,
    /// Streams sent each way (after one warm-up each) for the policy's
    /// throughput; the ratio is the median of back-to-back pairs.
    #[arg(long, default_value_t = 7)]
    streams: usize,
    /// Also measure the same start and removal with this container engine
    /// (local backend), and give Garrison's figures as ratios to its.
    #[arg(long, value_enum)]
    peer: Option<PeerChoice>,
    /// Containers the peer starts and removes.
    #[arg(long, default_value_t = 20)]
    peer_runs: usize,
    /// The OCI runtime of the local backend's sandboxes: runc, or runsc
    /// (gVisor).
    #[arg(long, value_parser = parse_runtime, default_value = "runc")]
    runtime: Runtime,
    /// Files in the repository of the syscall-heavy workload (`git status`,
    /// `--rounds` times); 0 skips it.
    #[arg(long, default_value_t = 10_000)]
    workload_files: u64,
    /// Run the local backend's sandboxes in user namespaces, as `garrison
    /// serve` does unless SANDBOX_USERNS=false; false measures without.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", default_value_t = true, action = clap::ArgAction::Set)]
    userns: bool,
    /// Also print the figures as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

impl SandboxArgs {
    fn policy(&self) -> bool {
        self.policy.unwrap_or(self.backend == BackendChoice::Local)
    }
}

fn parse_runtime(s: &str) -> Result<Runtime, String> {
    s.parse()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PeerChoice {
    Podman,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendChoice {
    Local,
    Host,
}

pub(crate) async fn run(args: SandboxArgs) -> anyhow::Result<()> {
    if args.sessions == 0 || args.rounds == 0 || args.files == 0 || args.file_kb == 0 {
        bail!("--sessions, --rounds, --files and --file-kb must be at least 1");
    }
    if args.policy() && args.backend != BackendChoice::Local {
        bail!("--policy needs the local backend, the one that enforces network policies");
    }
    if args.peer.is_some() && args.backend != BackendChoice::Local {
        bail!("--peer needs the local backend, whose image the peer imports");
    }
    if args.peer.is_some() && args.peer_runs == 0 {
        bail!("--peer-runs must be at least 1");
    }
    if args.policy() && (args.policy_sandboxes == 0 || args.transfer_mb == 0 || args.streams == 0) {
        bail!("--policy-sandboxes, --transfer-mb and --streams must be at least 1");
    }
    let state_dir = match &args.state_dir {
        Some(dir) => dir.clone(),
        None => orchestrator::settings::HostEnv::current()
            .default_state_dir()
            .map_err(|err| anyhow::anyhow!("{err}"))?,
    };
    let binary_path = emulator::locate_remote_sim().context(
        "devin-remote-sim not found next to this binary (or in $GARRISON_REMOTE_SIM); \
         scripts/setup puts the static one in target/release",
    )?;
    let binary = std::fs::read(&binary_path)
        .with_context(|| format!("reading {}", binary_path.display()))?;
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("creating {}", state_dir.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix("bench-sandbox-")
        .tempdir_in(&state_dir)
        .with_context(|| format!("creating a scratch directory in {}", state_dir.display()))?;
    let (backend, image) = open_backend(&args, &state_dir, scratch.path())?;
    let setup = Setup {
        backend: backend.kind().to_owned(),
        runtime: (args.backend == BackendChoice::Local).then(|| args.runtime.to_string()),
        image,
        cpus: args.cpus,
        memory_mb: args.memory_mb,
        disk_mb: args.disk_mb,
        binary_bytes: binary.len() as u64,
    };
    let resources = Resources {
        cpus: args.cpus,
        memory_mb: args.memory_mb,
        disk_mb: args.disk_mb,
    };
    let bench = phases::Bench {
        backend: backend.clone(),
        resources,
        image: (args.backend == BackendChoice::Local).then(|| args.image.clone()),
        run_id: format!("{:08x}", rand::random::<u32>()),
        policy: Default::default(),
    };
    let measured = measure(
        &bench,
        &args,
        (&binary, &binary_path),
        &state_dir,
        scratch.path(),
    )
    .await;
    let cleaned = phases::destroy_all(backend.as_ref()).await;
    match cleaned {
        Ok(()) => drop(scratch),
        Err(e) => {
            // Removing a directory with mounts still in it would reach into
            // them: leave it for a look and `umount`.
            let kept = scratch.keep();
            eprintln!(
                "bench sandbox: cleaning up failed ({e:#}); left {}",
                kept.display()
            );
        }
    }
    let (lifecycle, memory, snapshots, policy, peer, workload) = measured?;
    let report = Report {
        setup,
        lifecycle,
        memory,
        snapshots,
        policy,
        peer,
        workload,
    };
    print!("{}", report.table());
    if args.json {
        println!("{}", report.json());
    }
    Ok(())
}

type Measured = (
    figures::Lifecycle,
    figures::Memory,
    figures::Snapshots,
    Option<policy::PolicyFigures>,
    Option<peer::PeerFigures>,
    Option<workload::Workload>,
);

async fn measure(
    bench: &phases::Bench,
    args: &SandboxArgs,
    (binary, binary_path): (&[u8], &Path),
    state_dir: &Path,
    scratch: &Path,
) -> anyhow::Result<Measured> {
    progress(&format!(
        "creating {} sandboxes one after another",
        args.sessions
    ));
    let (mut lifecycle, handles) = bench.create_and_start(args.sessions, binary).await?;
    progress("measuring the memory of the idle sandboxes");
    let memory = bench.memory(&handles).await;
    progress("destroying them one after another");
    lifecycle.destroy = bench.destroy_each(&handles).await?;
    let peer = match args.peer {
        Some(PeerChoice::Podman) => {
            progress(&format!(
                "peer: {} podman containers started and removed one after another",
                args.peer_runs
            ));
            Some(measure_peer(args, binary_path, state_dir, scratch).await?)
        }
        None => None,
    };
    progress(&format!(
        "snapshot and restore of {} files of {} KiB, {} rounds",
        args.files, args.file_kb, args.rounds
    ));
    let snapshots = bench
        .snapshots(args.files, args.file_kb * 1024, args.rounds)
        .await?;
    let policy = if args.policy() {
        Some(measure_policy(bench, args, binary, state_dir, scratch).await?)
    } else {
        None
    };
    let workload = if args.workload_files > 0 {
        progress(&format!(
            "workload: git status on {} files, {} rounds",
            args.workload_files, args.rounds
        ));
        Some(workload::measure(bench, args.workload_files, args.rounds).await?)
    } else {
        None
    };
    Ok((lifecycle, memory, snapshots, policy, peer, workload))
}

async fn measure_peer(
    args: &SandboxArgs,
    binary_path: &Path,
    state_dir: &Path,
    scratch: &Path,
) -> anyhow::Result<peer::PeerFigures> {
    let images = ImageStore::open(&images_dir(args, state_dir))?;
    let image = images.resolve(&args.image)?;
    peer::measure(&peer::PeerSetup {
        rootfs: image.rootfs.clone(),
        image_id: image.id.clone(),
        binary: binary_path.to_owned(),
        dir: scratch.join("podman"),
        runs: args.peer_runs,
        cpus: args.cpus,
        memory_mb: args.memory_mb,
    })
    .await
}

fn images_dir(args: &SandboxArgs, state_dir: &Path) -> PathBuf {
    args.images_dir
        .clone()
        .unwrap_or_else(|| state_dir.join("images"))
}

async fn measure_policy(
    bench: &phases::Bench,
    args: &SandboxArgs,
    binary: &[u8],
    state_dir: &Path,
    scratch: &Path,
) -> anyhow::Result<policy::PolicyFigures> {
    // The streams first: measured right after the 2 × --policy-sandboxes
    // destroys of the latency figures, some ran at 20-50 MB/s in trial runs
    // (the kernel tears network namespaces down later, on its own time).
    progress(&format!(
        "network policy: {} streams of {} MB each way, in a private world of namespaces",
        args.streams, args.transfer_mb
    ));
    // A backend of its own: the world's thread must create it, in its
    // namespace, over a directory of its own.
    let (config, _) = local_config(args, state_dir, &scratch.join("world"))?;
    let transfer = policy::measure_throughput(policy::WorldSetup {
        config,
        resources: bench.resources,
        image: bench.image.clone(),
        run_id: format!("{}-w", bench.run_id),
        bytes: args.transfer_mb * 1_000_000,
        rounds: args.streams,
    })
    .await?;
    progress(&format!(
        "network policy: {} sandboxes each with it disabled and enabled, alternating",
        args.policy_sandboxes
    ));
    let mut figures = policy::start_latency(bench, args.policy_sandboxes, binary).await?;
    figures.transfer = transfer;
    Ok(figures)
}

/// The backend over the scratch directory, and the image it starts from.
fn open_backend(
    args: &SandboxArgs,
    state_dir: &Path,
    scratch: &Path,
) -> anyhow::Result<(Arc<dyn Sandbox>, Option<String>)> {
    let this_exe = std::env::current_exe().context("locating this binary")?;
    match args.backend {
        BackendChoice::Host => {
            let backend = HostBackend::new(HostConfig {
                root: scratch.join("host"),
                snapshot_dir: scratch.join("snapshots"),
                snapshot_store: None,
                shim_exe: this_exe,
            })?;
            Ok((Arc::new(backend), None))
        }
        BackendChoice::Local => {
            let (config, image) = local_config(args, state_dir, scratch)?;
            Ok((Arc::new(LocalBackend::new(config)?), Some(image)))
        }
    }
}

/// The local backend's configuration over `scratch`, and the image's label.
fn local_config(
    args: &SandboxArgs,
    state_dir: &Path,
    scratch: &Path,
) -> anyhow::Result<(LocalConfig, String)> {
    let this_exe = std::env::current_exe().context("locating this binary")?;
    let images_dir = images_dir(args, state_dir);
    let images = ImageStore::open(&images_dir)
        .with_context(|| format!("opening the images in {}", images_dir.display()))?;
    let image = images.resolve(&args.image).with_context(|| {
        format!(
            "image {:?} in {} (scripts/setup builds `default` into \
             target/test-state/images; pass --images-dir)",
            args.image,
            images_dir.display()
        )
    })?;
    // The same shim `garrison serve` uses for this backend.
    let shim_exe = std::env::var_os("GARRISON_STATIC_SHIM")
        .map(PathBuf::from)
        .unwrap_or_else(|| this_exe.with_file_name("garrison-shim"));
    let config = LocalConfig {
        root: scratch.join("local"),
        snapshot_dir: scratch.join("snapshots"),
        snapshot_store: None,
        images,
        default_image: args.image.clone(),
        shim_exe,
        tini: PathBuf::from("/usr/bin/tini-static"),
        runc: Runtime::Runc.default_binary(),
        runsc: Runtime::Runsc.default_binary(),
        runtime: args.runtime,
        desktop: false,
        userns: args.userns,
        devices: Vec::new(),
        cdi_spec_dirs: Vec::new(),
    };
    // User namespaces are runc's (see LocalConfig::userns).
    let isolation = match (args.runtime, args.userns) {
        (Runtime::Runc, true) => "user namespaces",
        (Runtime::Runc, false) => "no user namespace",
        (Runtime::Runsc, _) => "gVisor's own ids",
    };
    Ok((
        config,
        format!("{} ({}), {isolation}", args.image, short_id(&image.id)),
    ))
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min("sha256-".len() + 12)]
}

/// Progress goes to stderr so stdout holds only the figures.
fn progress(message: &str) {
    eprintln!("bench sandbox: {message}");
}
