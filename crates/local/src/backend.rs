//! [`LocalBackend`]: the `Sandbox` trait over runc (or runsc) containers.
//!
//! Per sandbox, under `<root>/sandboxes/<name>/`:
//!
//! ```text
//! handle.json   the Handle (image id included), so `list` finds leftovers
//! net.json      the sandbox's network namespace (see `net`)
//! disk.img      ext4 image of SANDBOX_DISK_MB, loop-mounted on disk/
//! disk/upper    the session's writable overlay layer (what snapshots keep)
//! disk/work     overlayfs work directory
//! rootfs/       the overlay mount: image below, upper above
//! userns        the pinned user namespace (SANDBOX_USERNS, on by default)
//! netns         the network namespace made with it (also at /run/netns)
//! ids           its host id range (see `userns`)
//! lower/        the image, idmapped through it
//! idisk/        disk/, idmapped through it (the overlay's upper and work)
//! config.json   the OCI bundle's configuration
//! init.pid      host pid of the container's init (tini; under runsc, the
//!               gVisor sandbox process)
//! runtime       the OCI runtime it was made with (`runc` when absent)
//! proc/<id>/    host-side records of a process: shim.pid
//! ```
//!
//! Processes run under the shim inside the container (`/.garrison/bin`),
//! which records the child's pid, output and exit code in
//! `/.garrison/proc/<id>/`; the host reads them through the overlay with
//! [`Root`], which never follows a symlink out of the container.
//!
//! Building and tearing down a sandbox lives in `backend/lifecycle.rs`;
//! starting, watching and signalling processes in `backend/process.rs`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow};
use async_trait::async_trait;

use crate::archive;
use crate::images::ImageStore;
use crate::net::{self, NetConfig, SandboxNet};
use crate::rootfs::Root;
use crate::runc::{Runc, Runtime};
use sandbox::{
    Capabilities, Handle, ObjectStoreSettings, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus,
    Result, Sandbox, SandboxError, SandboxName, SandboxSpec, SnapshotRef, SnapshotStore,
    list_handles, read_chunk,
};
use shim::OUTPUT_FILE;

mod desktop;
#[cfg(test)]
mod desktop_tests;
mod devices;
mod ids;
mod lifecycle;
mod process;

const HANDLE_FILE: &str = "handle.json";
const NET_FILE: &str = "net.json";
const USERNS_FILE: &str = "userns";
const NETNS_FILE: &str = "netns";
const IDS_FILE: &str = "ids";
const LOWER_DIR: &str = "lower";
const IDMAPPED_DISK_DIR: &str = "idisk";
/// Records the sandbox's [`Runtime`]: a sandbox is driven by the runtime it
/// was made with, even after the setting changed.
const RUNTIME_FILE: &str = "runtime";

/// Where the local backend keeps things and the host tools it uses.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Holds `sandboxes/`, `runc/` and `runsc/` (the runtimes' state) and
    /// `net/`.
    pub root: PathBuf,
    /// Holds snapshots; may be shared between Garrison processes. With an
    /// object store, only spools archives on their way.
    pub snapshot_dir: PathBuf,
    /// Keeps snapshots in an object store instead.
    pub snapshot_store: Option<ObjectStoreSettings>,
    /// The images sessions start from.
    pub images: ImageStore,
    /// The image used when a session names none.
    pub default_image: String,
    /// A statically linked `garrison-shim`, copied into every container.
    pub shim_exe: PathBuf,
    /// A statically linked tini, the containers' init.
    pub tini: PathBuf,
    /// runc.
    pub runc: PathBuf,
    /// gVisor's runsc.
    pub runsc: PathBuf,
    /// The runtime new sandboxes run on (`SANDBOX_RUNTIME`).
    pub runtime: Runtime,
    /// Runs a desktop in every sandbox: Xvfb on [`DESKTOP_DISPLAY`] (and
    /// the image's window manager), kept alive (see `backend/desktop.rs`),
    /// so the remote gets `DISPLAY` and `DEVIN_OUTPOST_DESKTOP=true`. The
    /// image must have Xvfb (the `desktop` recipe). Off by default.
    pub desktop: bool,
    /// Runs each container in a user namespace of its own, so that its
    /// root is an unprivileged host uid (see `userns`). On by default.
    pub userns: bool,
    /// CDI devices (`vendor.com/class=name`) handed to every sandbox,
    /// resolved when it is created (see `cdi`). runc only.
    pub devices: Vec<String>,
    /// Where the CDI specs are; empty: [`crate::cdi::DEFAULT_SPEC_DIRS`].
    pub cdi_spec_dirs: Vec<PathBuf>,
}

/// The X display a sandbox's desktop runs on.
pub const DESKTOP_DISPLAY: &str = ":99";

impl LocalConfig {
    /// Defaults for a state directory: the tools from Debian's packages, the
    /// static shim next to the running binary.
    pub fn for_state_dir(
        state_dir: &Path,
        snapshot_dir: &Path,
        shim_exe: PathBuf,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            root: state_dir.join("local"),
            snapshot_dir: snapshot_dir.join("local"),
            snapshot_store: None,
            images: ImageStore::open(&state_dir.join("images"))?,
            default_image: crate::images::DEFAULT_IMAGE.to_owned(),
            shim_exe,
            tini: PathBuf::from("/usr/bin/tini-static"),
            runc: Runtime::Runc.default_binary(),
            runsc: Runtime::Runsc.default_binary(),
            runtime: Runtime::default(),
            desktop: false,
            userns: true,
            devices: Vec::new(),
            cdi_spec_dirs: Vec::new(),
        })
    }
}

/// Longest a snapshot may take; its size is bounded by the disk.
const SNAPSHOT_MAX_TIME: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The local backend: see the crate documentation.
pub struct LocalBackend {
    config: LocalConfig,
    snapshots: SnapshotStore,
    /// The configured runtime, for new sandboxes; existing ones use
    /// [`LocalBackend::runtime_of`].
    runc: Runc,
    net: NetConfig,
    /// The id range slots in use, read from the sandboxes' directories at
    /// the first create that needs one.
    id_slots: std::sync::Mutex<Option<std::collections::BTreeSet<u32>>>,
}

fn fatal(e: impl Into<anyhow::Error>) -> SandboxError {
    SandboxError::Fatal(e.into())
}

impl LocalBackend {
    /// Opens the backend: checks its tools, recovers the state of sandboxes
    /// made by an earlier run, and opens its snapshot store.
    pub fn new(config: LocalConfig) -> anyhow::Result<Self> {
        crate::reaper::start()?;
        let runc = Self::oci(&config, config.runtime);
        for tool in [&runc.binary, &config.tini, &config.shim_exe] {
            anyhow::ensure!(
                tool.exists(),
                "{} not found (scripts/setup installs runc, runsc and tini and builds the \
                 static shim; SANDBOX_RUNTIME is {})",
                tool.display(),
                config.runtime
            );
        }
        for dir in [
            config.root.join("sandboxes"),
            config.root.join("runc"),
            config.root.join("runsc"),
            config.snapshot_dir.clone(),
        ] {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let net = NetConfig {
            run_dir: config.root.join("net"),
            dns_upstream: None,
        };
        let snapshots = SnapshotStore::open(
            config.snapshot_dir.clone(),
            config.snapshot_store.as_ref(),
            "local",
        )?;
        Ok(Self {
            config,
            snapshots,
            runc,
            net,
            id_slots: std::sync::Mutex::new(None),
        })
    }

    /// Sends its sandboxes' allowed DNS queries to `upstream` instead of the
    /// host's first `nameserver` (tests use a resolver of their own on the
    /// host's loopback).
    pub fn with_dns_upstream(mut self, upstream: std::net::SocketAddr) -> Self {
        self.net.dns_upstream = Some(upstream);
        self
    }

    /// The command line of `runtime`, with its own state root.
    fn oci(config: &LocalConfig, runtime: Runtime) -> Runc {
        Runc {
            runtime,
            binary: match runtime {
                Runtime::Runc => config.runc.clone(),
                Runtime::Runsc => config.runsc.clone(),
            },
            state_root: config.root.join(runtime.as_str()),
        }
    }

    /// The runtime sandbox `name` was made with (see [`RUNTIME_FILE`]); the
    /// configured one for a sandbox that has not recorded one yet.
    pub(super) fn runtime_of(&self, name: &str) -> Runc {
        let recorded = self
            .sandbox_dir(name)
            .ok()
            .and_then(|dir| std::fs::read_to_string(dir.join(RUNTIME_FILE)).ok())
            .and_then(|text| text.parse::<Runtime>().ok());
        match recorded {
            Some(runtime) => Self::oci(&self.config, runtime),
            None => self.runc.clone(),
        }
    }

    /// The configured runtime of new sandboxes.
    pub fn runtime(&self) -> Runtime {
        self.config.runtime
    }

    /// The host's end of sandbox `name`'s network link (`gv…`), for
    /// diagnostics and leftover checks.
    pub fn host_link(&self, name: &str) -> Result<String> {
        net::host_link(&self.net, name)
    }

    /// The host directory of sandbox `name`'s writable layer (what
    /// snapshots keep), for tests and diagnostics.
    pub fn upper_dir(&self, name: &str) -> Result<PathBuf> {
        Ok(self.sandbox_dir(name)?.join("disk").join("upper"))
    }

    fn sandbox_dir(&self, name: &str) -> Result<PathBuf> {
        let name = SandboxName::parse(name)
            .ok_or_else(|| fatal(anyhow!("invalid sandbox name {name:?}")))?;
        Ok(self.config.root.join("sandboxes").join(name.as_str()))
    }

    fn existing_dir(&self, handle: &Handle) -> Result<PathBuf> {
        let dir = self.sandbox_dir(&handle.name)?;
        if dir.join(HANDLE_FILE).exists() {
            Ok(dir)
        } else {
            Err(SandboxError::Gone(format!("sandbox {}", handle.name)))
        }
    }

    /// The sandbox's root, to read from (status polls and output reads, the
    /// hot path, need no owner).
    fn root(&self, handle: &Handle) -> Result<Root> {
        self.open_root(handle, false)
    }

    /// The sandbox's root, to write into as its root's owner (see
    /// `Root::open_as`).
    fn writable_root(&self, handle: &Handle) -> Result<Root> {
        self.open_root(handle, true)
    }

    fn open_root(&self, handle: &Handle, writes: bool) -> Result<Root> {
        let dir = self.existing_dir(handle)?;
        let owner = writes
            .then(|| Self::recorded_ids(&dir))
            .flatten()
            .map(|ids| ids.host_base);
        Root::open_as(&dir.join("rootfs"), owner)
            .map_err(|e| SandboxError::Gone(format!("sandbox {} root: {e}", handle.name)))
    }

    /// The sandbox's network record: `None` when it is missing or does not
    /// parse, an error when a newer Garrison wrote it.
    fn read_net(&self, dir: &Path) -> Result<Option<SandboxNet>> {
        net::read_record(&dir.join(NET_FILE))
    }
}

#[async_trait]
impl Sandbox for LocalBackend {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            os: sandbox::Os::Linux,
            // Containers on this machine run its architecture.
            arch: sandbox::Arch::current(),
            suspend_keeps_memory: false,
            enforces_network_policy: true,
            snapshots: true,
        }
    }

    /// Neither runtime can keep a local sandbox's processes through a
    /// suspend here (see `memory_suspend`).
    fn memory_suspend_unavailable(&self) -> Option<String> {
        Some(crate::memory_suspend::unavailable_reason(self.runtime()))
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Handle> {
        self.create_sandbox(spec).await
    }

    /// Root runs everything in the container (see `oci::config`); the
    /// browser is the one its image recorded (`chrome_path`, found when the
    /// image was built or imported); the desktop is there when it is turned
    /// on (create started Xvfb, or refused an image without it).
    async fn machine(&self, handle: &Handle) -> Result<sandbox::MachineInfo> {
        let image = match &handle.image {
            Some(id) => Some(
                self.config
                    .images
                    .resolve(id)
                    .map_err(|e| fatal(e.context("reading the sandbox's image")))?,
            ),
            None => None,
        };
        let has_xvfb = image.as_ref().is_some_and(|i| i.xvfb_path.is_some());
        Ok(sandbox::MachineInfo {
            user: "root".to_owned(),
            chrome_path: image.and_then(|i| i.chrome_path),
            display: (self.config.desktop && has_xvfb).then(|| DESKTOP_DISPLAY.to_owned()),
        })
    }

    async fn keep_desktop(&self, handle: &Handle) -> Result<sandbox::DesktopState> {
        self.keep_desktop_of(handle).await
    }

    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
        let root = self.writable_root(handle)?;
        if let Some(parent) = Path::new(path)
            .parent()
            .and_then(Path::to_str)
            .filter(|p| *p != "/")
        {
            root.create_dir_all(parent, 0o755)
                .map_err(|e| fatal(anyhow!("creating {parent}: {e}")))?;
        }
        root.write(path, bytes, mode)
            .map_err(|e| fatal(anyhow!("writing {path}: {e}")))
    }

    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> Result<ProcessRef> {
        self.spawn_process(handle, process).await
    }

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        // After a Garrison restart the sandbox's DNS resolver is started
        // again here (status is polled); a no-op while it runs.
        if let Ok(dir) = self.sandbox_dir(&handle.name) {
            let ensured = match self.read_net(&dir) {
                Ok(Some(sandbox_net)) => net::ensure_resolver(&self.net, &sandbox_net).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = ensured {
                tracing::warn!(sandbox = %handle.name, error = %e, "restarting the DNS resolver");
            }
        }
        self.process_status(handle, process)
    }

    async fn update_network_policy(
        &self,
        handle: &Handle,
        policy: &common::NetworkPolicy,
    ) -> Result<()> {
        let dir = self.existing_dir(handle)?;
        let sandbox_net = self
            .read_net(&dir)?
            .ok_or_else(|| SandboxError::Gone(format!("network of {}", handle.name)))?;
        net::apply_policy(&self.net, &sandbox_net, policy).await
    }

    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()> {
        self.kill_process(handle, process, grace).await
    }

    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        let root = self.root(handle)?;
        match root.open_read(&Self::proc_path(process, OUTPUT_FILE)?) {
            Ok(file) => read_chunk(file, offset, max),
            Err(_) => Ok(OutputChunk {
                data: Vec::new(),
                next_offset: offset,
            }),
        }
    }

    async fn snapshot(&self, handle: &Handle) -> Result<SnapshotRef> {
        let dir = self.existing_dir(handle)?;
        let snapshot = self.snapshots.new_ref(
            self.kind(),
            &handle.name,
            handle.image.clone(),
            sandbox::Lineage::from_labels(&handle.labels),
        );
        let archive_path = self.snapshots.staging_path(&snapshot)?;
        // Frozen, the layer cannot change under tar. A running container
        // that will not freeze could rewrite it while it is read (a file
        // grown without end, swapped for a link): no snapshot then. A
        // stopped one changes nothing.
        let runc = self.runtime_of(&handle.name);
        let paused = runc.pause(&handle.name).await.is_ok();
        if !paused && runc.is_running(&handle.name).await {
            return Err(SandboxError::Transient(anyhow!(
                "{} could not be paused; not snapshotting a filesystem that can change under it",
                handle.name
            )));
        }
        let limits = archive::PackLimits {
            // The layer lives on the sandbox's disk: its data cannot exceed
            // the disk, and tar's headers add little to it.
            max_bytes: std::fs::metadata(dir.join("disk.img"))
                .map_or(u64::MAX, |m| m.len().saturating_add(256 << 20)),
            max_time: SNAPSHOT_MAX_TIME,
        };
        let packed = archive::pack(
            &dir.join("disk").join("upper"),
            ".garrison",
            &archive_path,
            limits,
        )
        .await;
        if paused && let Err(e) = runc.resume(&handle.name).await {
            tracing::warn!(sandbox = handle.name, error = %e, "resuming after a snapshot failed");
        }
        let size = packed.map_err(|e| SandboxError::Transient(e.context("snapshot")))?;
        self.snapshots.record(snapshot, size).await
    }

    fn snapshot_store(&self) -> Option<&SnapshotStore> {
        Some(&self.snapshots)
    }

    async fn destroy(&self, handle: &Handle) -> Result<()> {
        let dir = self.sandbox_dir(&handle.name)?;
        if !dir.exists()
            && self
                .runtime_of(&handle.name)
                .state(&handle.name)
                .await
                .is_none()
        {
            return Ok(());
        }
        self.teardown(&handle.name, &dir).await.map_err(fatal)
    }

    async fn list(&self) -> Result<Vec<Handle>> {
        list_handles(&self.config.root.join("sandboxes"), HANDLE_FILE)
    }

    async fn remove_remains(&self, name: &SandboxName) -> Result<bool> {
        self.remove_remains_of(name.as_str()).await
    }

    fn gateway_url_for(&self, handle: &Handle, url: &str) -> String {
        match self
            .sandbox_dir(&handle.name)
            .ok()
            .and_then(|dir| self.read_net(&dir).ok().flatten())
        {
            Some(sandbox_net) => net::rewrite_gateway_url(url, &sandbox_net),
            None => url.to_owned(),
        }
    }
}
