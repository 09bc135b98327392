//! [`LocalBackend`]: the `Sandbox` trait over runc containers.
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
//! config.json   the OCI bundle's configuration
//! init.pid      host pid of the container's init (tini)
//! proc/<id>/    host-side records of a process: shim.pid
//! ```
//!
//! Processes run under the shim inside the container (`/.garrison/bin`),
//! which records the child's pid, output and exit code in
//! `/.garrison/proc/<id>/`; the host reads them through the overlay with
//! [`Root`], which never follows a symlink out of the container.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow};
use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::images::ImageStore;
use super::net::{self, NetConfig, SandboxNet};
use super::oci::{self, ContainerConfig};
use super::rootfs::Root;
use super::runc::Runc;
use super::{archive, disk};
use crate::names::is_plain_id;
use crate::shim::{
    self, CHILD_PID_FILE, ERROR_FILE, EXIT_FILE, OUTPUT_FILE, REQUEST_FILE, ShimRequest,
};
use crate::snapshot_dir::{SnapshotDir, list_handles, read_chunk};
use crate::{
    Capabilities, Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Result, Sandbox,
    SandboxError, SandboxName, SandboxSpec, SnapshotRef,
};

const HANDLE_FILE: &str = "handle.json";
const NET_FILE: &str = "net.json";
const SHIM_PID_FILE: &str = "shim.pid";
/// How long a started shim may take to report its child.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the local backend keeps things and the host tools it uses.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Holds `sandboxes/`, `runc/` (runc's state) and `net/`.
    pub root: PathBuf,
    /// Holds snapshots; may be shared between Garrison processes.
    pub snapshot_dir: PathBuf,
    pub images: ImageStore,
    /// The image used when a session names none.
    pub default_image: String,
    /// A statically linked `garrison-shim`, copied into every container.
    pub shim_exe: PathBuf,
    /// A statically linked tini, the containers' init.
    pub tini: PathBuf,
    pub runc: PathBuf,
}

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
            images: ImageStore::open(&state_dir.join("images"))?,
            default_image: super::images::DEFAULT_IMAGE.to_owned(),
            shim_exe,
            tini: PathBuf::from("/usr/bin/tini-static"),
            runc: PathBuf::from("/usr/sbin/runc"),
        })
    }
}

pub struct LocalBackend {
    config: LocalConfig,
    snapshots: SnapshotDir,
    runc: Runc,
    net: NetConfig,
}

fn fatal(e: impl Into<anyhow::Error>) -> SandboxError {
    SandboxError::Fatal(e.into())
}

impl LocalBackend {
    pub fn new(config: LocalConfig) -> anyhow::Result<Self> {
        for tool in [&config.runc, &config.tini, &config.shim_exe] {
            anyhow::ensure!(
                tool.exists(),
                "{} not found (scripts/setup installs runc and tini and builds the static shim)",
                tool.display()
            );
        }
        for dir in [
            config.root.join("sandboxes"),
            config.root.join("runc"),
            config.snapshot_dir.clone(),
        ] {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let runc = Runc {
            binary: config.runc.clone(),
            state_root: config.root.join("runc"),
        };
        let net = NetConfig {
            run_dir: config.root.join("net"),
            dns_upstream: None,
        };
        let snapshots = SnapshotDir::new(config.snapshot_dir.clone());
        Ok(Self {
            config,
            snapshots,
            runc,
            net,
        })
    }

    /// The host's end of sandbox `name`'s network link (`gv…`), for
    /// diagnostics and leftover checks.
    pub fn host_link(&self, name: &str) -> Result<String> {
        net::host_link(&self.net, name)
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

    fn root(&self, handle: &Handle) -> Result<Root> {
        let dir = self.existing_dir(handle)?;
        Root::open(&dir.join("rootfs"))
            .map_err(|e| SandboxError::Gone(format!("sandbox {} root: {e}", handle.name)))
    }

    fn proc_path(process: &ProcessRef, file: &str) -> Result<String> {
        if !is_plain_id(&process.id) {
            return Err(fatal(anyhow!("invalid process id {:?}", process.id)));
        }
        Ok(format!("{}/{}/{file}", oci::PROC_DIR, process.id))
    }

    fn shim_record(&self, handle: &Handle, process: &ProcessRef) -> Result<Option<String>> {
        let dir = self.existing_dir(handle)?;
        Ok(std::fs::read_to_string(dir.join("proc").join(&process.id).join(SHIM_PID_FILE)).ok())
    }

    fn process_status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        let root = self.root(handle)?;
        let read_exit = |root: &Root| -> Result<Option<i32>> {
            match root.read_small(&Self::proc_path(process, EXIT_FILE)?, 32) {
                Ok(bytes) => Ok(Some(
                    String::from_utf8_lossy(&bytes)
                        .trim()
                        .parse()
                        .unwrap_or(255),
                )),
                Err(_) => Ok(None),
            }
        };
        if let Some(code) = read_exit(&root)? {
            return Ok(ProcessStatus::Exited(code));
        }
        match self.shim_record(handle, process)? {
            None => Err(SandboxError::Gone(format!("process {}", process.id))),
            Some(record) if shim::is_alive(&record) => Ok(ProcessStatus::Running),
            Some(_) => Ok(read_exit(&root)?
                .map(ProcessStatus::Exited)
                .unwrap_or(ProcessStatus::Lost)),
        }
    }

    /// The host pid of the process the shim started (the shim's only
    /// child), so signals reach it without entering the container.
    fn child_host_pid(record: &str) -> Option<i32> {
        let shim_pid: i32 = record.split_whitespace().next()?.parse().ok()?;
        let children =
            std::fs::read_to_string(format!("/proc/{shim_pid}/task/{shim_pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    fn signal(&self, handle: &Handle, process: &ProcessRef, signal: Signal) -> Result<()> {
        if let Some(record) = self.shim_record(handle, process)?
            && shim::is_alive(&record)
            && let Some(child) = Self::child_host_pid(&record)
        {
            let _ = killpg(Pid::from_raw(child), signal);
        }
        Ok(())
    }

    fn read_net(&self, dir: &Path) -> Option<SandboxNet> {
        serde_json::from_slice(&std::fs::read(dir.join(NET_FILE)).ok()?).ok()
    }

    /// Tears down whatever exists of a sandbox, in reverse order of creation.
    async fn teardown(&self, name: &str, dir: &Path) -> anyhow::Result<()> {
        self.runc.delete(name).await?;
        net::destroy(&self.net, name)
            .await
            .map_err(|e| anyhow!(e))?;
        disk::unmount(&dir.join("rootfs"))?;
        disk::unmount(&dir.join("disk"))?;
        // The handle goes first: a crash halfway leaves a directory `list`
        // no longer reports but the next destroy still removes.
        let _ = std::fs::remove_file(dir.join(HANDLE_FILE));
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .await??;
        Ok(())
    }

    /// The session's root filesystem: the size-limited disk, the writable
    /// layer (restored from the snapshot when there is one), the overlay
    /// mount, and Garrison's files inside it.
    async fn prepare_root(
        &self,
        spec: &SandboxSpec,
        dir: &Path,
        image_rootfs: &Path,
    ) -> anyhow::Result<Root> {
        disk::create(&dir.join("disk.img"), spec.resources.disk_mb).await?;
        disk::mount(&dir.join("disk.img"), &dir.join("disk")).await?;
        let upper = dir.join("disk").join("upper");
        std::fs::create_dir_all(&upper)?;
        if let Some(snapshot) = &spec.restore_from {
            let archive_path = self
                .snapshots
                .archive_path(snapshot)
                .map_err(|e| anyhow!(e))?;
            if !archive_path.exists() {
                return Err(anyhow!(SandboxError::Gone(format!(
                    "snapshot {}",
                    snapshot.id
                ))));
            }
            archive::unpack(&archive_path, &upper)
                .await
                .context("restoring the snapshot")?;
        }
        disk::mount_overlay(
            image_rootfs,
            &upper,
            &dir.join("disk").join("work"),
            &dir.join("rootfs"),
        )
        .await?;

        let root = Root::open(&dir.join("rootfs"))?;
        root.create_dir_all(oci::BIN_DIR, 0o755)?;
        root.create_dir_all(oci::PROC_DIR, 0o700)?;
        for (src, dst) in [
            (&self.config.tini, oci::INIT),
            (&self.config.shim_exe, oci::SHIM),
        ] {
            let bytes = tokio::fs::read(src)
                .await
                .with_context(|| format!("reading {}", src.display()))?;
            root.write(dst, &bytes, 0o755)?;
        }
        for dir_in in [oci::WORKDIR, oci::STATE_DIR, oci::HOME] {
            root.create_dir_all(dir_in, 0o700)?;
        }

        Ok(root)
    }

    async fn build(&self, spec: &SandboxSpec, dir: &Path) -> anyhow::Result<Handle> {
        let name = spec.name.as_str();
        // A resume runs on the image its snapshot was made on, even after a
        // newer image took the name.
        let image_ref = spec
            .restore_from
            .as_ref()
            .and_then(|s| s.base_image.clone())
            .or_else(|| spec.image.clone())
            .unwrap_or_else(|| self.config.default_image.clone());
        let image = self
            .config
            .images
            .resolve(&image_ref)
            .with_context(|| format!("image {image_ref:?}"))?;

        std::fs::create_dir_all(dir.join("proc"))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        // The root filesystem and the network namespace do not depend on each
        // other: building them together takes the longer of the two, not the
        // sum. A failure of either is cleaned up by `create`'s teardown.
        let (root, sandbox_net) =
            tokio::try_join!(self.prepare_root(spec, dir, &image.rootfs), async {
                net::create(
                    &self.net,
                    &spec.name,
                    spec.network.gateway_url.as_deref(),
                    &spec.network.policy,
                )
                .await
                .map_err(|e| anyhow!(e))
            })?;
        std::fs::write(dir.join(NET_FILE), serde_json::to_vec(&sandbox_net)?)?;
        if let Some(dns) = sandbox_net.dns {
            root.create_dir_all("/etc", 0o755)?;
            let conf = format!("nameserver {dns}\n");
            root.write("/etc/resolv.conf", conf.as_bytes(), 0o644)?;
        }

        let cgroups_path = format!("/garrison/{name}");
        let config = oci::config(&ContainerConfig {
            hostname: "sandbox",
            resources: &spec.resources,
            cgroups_path: &cgroups_path,
            netns: Some(&sandbox_net.netns_path),
        });
        std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
        self.runc
            .run_detached(name, dir, &dir.join("init.pid"))
            .await?;

        let handle = Handle {
            backend: "local".to_owned(),
            id: name.to_owned(),
            name: name.to_owned(),
            labels: spec.labels.clone(),
            workdir: oci::WORKDIR.to_owned(),
            state_dir: oci::STATE_DIR.to_owned(),
            bin_dir: oci::BIN_DIR.to_owned(),
            home: oci::HOME.to_owned(),
            image: Some(image.id.clone()),
        };
        shim::write_atomically(&dir.join(HANDLE_FILE), &serde_json::to_vec_pretty(&handle)?)?;
        Ok(handle)
    }
}

#[async_trait]
impl Sandbox for LocalBackend {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            suspend_keeps_memory: false,
            enforces_network_policy: true,
            snapshots: true,
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Handle> {
        let dir = self.sandbox_dir(spec.name.as_str())?;
        if dir.join(HANDLE_FILE).exists() {
            return Err(fatal(anyhow!("sandbox {} exists already", spec.name)));
        }
        if dir.exists() {
            // A create that crashed before it recorded the handle: nothing
            // ran in it (processes start only after the handle exists).
            tracing::warn!(sandbox = %spec.name, "removing the remains of an interrupted create");
            self.teardown(spec.name.as_str(), &dir)
                .await
                .map_err(fatal)?;
        }
        std::fs::create_dir_all(&dir).map_err(fatal)?;
        match self.build(spec, &dir).await {
            Ok(handle) => Ok(handle),
            Err(e) => {
                if let Err(cleanup) = self.teardown(spec.name.as_str(), &dir).await {
                    tracing::warn!(sandbox = %spec.name, error = %cleanup, "cleaning up a failed create");
                }
                match e.downcast::<SandboxError>() {
                    Ok(sandbox_error) => Err(sandbox_error),
                    Err(other) => Err(fatal(other)),
                }
            }
        }
    }

    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
        let root = self.root(handle)?;
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
        if !is_plain_id(&process.name) {
            return Err(fatal(anyhow!("invalid process name {:?}", process.name)));
        }
        let dir = self.existing_dir(handle)?;
        let root = self.root(handle)?;
        let inside = format!("{}/{}", oci::PROC_DIR, process.name);
        root.create_dir_new(&inside, 0o700)
            .map_err(|e| fatal(anyhow!("process {}: {e}", process.name)))?;
        let host_dir = dir.join("proc").join(&process.name);
        std::fs::create_dir_all(&host_dir).map_err(fatal)?;
        let request = ShimRequest {
            argv: process.argv.clone(),
            env: process
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cwd: PathBuf::from(&process.cwd),
            dir: PathBuf::from(&inside),
        };
        let request = serde_json::to_vec(&request).map_err(fatal)?;
        root.write(&format!("{inside}/{REQUEST_FILE}"), &request, 0o600)
            .map_err(fatal)?;

        let pid_file = host_dir.join("exec.pid");
        self.runc
            .exec_detached(
                &handle.name,
                &host_dir.join("runc.log"),
                &pid_file,
                "/",
                &[oci::SHIM, shim::SHIM_FILE_ARG, &inside],
            )
            .await
            .map_err(fatal)?;
        let shim_pid: u32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| fatal(anyhow!("runc wrote no pid for {}", process.name)))?;
        let record = format!(
            "{shim_pid} {}",
            shim::proc_start_time(shim_pid).unwrap_or(0)
        );
        shim::write_atomically(&host_dir.join(SHIM_PID_FILE), record.as_bytes()).map_err(fatal)?;

        // Started once the shim recorded its child (or reported why not).
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(message) = root.read_small(&format!("{inside}/{ERROR_FILE}"), 4096) {
                return Err(fatal(anyhow!("{}", String::from_utf8_lossy(&message))));
            }
            if root.exists(&format!("{inside}/{CHILD_PID_FILE}"))
                || root.exists(&format!("{inside}/{EXIT_FILE}"))
            {
                return Ok(ProcessRef {
                    id: process.name.clone(),
                });
            }
            if !shim::is_alive(&record) && !root.exists(&format!("{inside}/{EXIT_FILE}")) {
                return Err(fatal(anyhow!(
                    "the shim of {} died before starting it",
                    process.name
                )));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Transient(anyhow!(
                    "{} did not start within {START_TIMEOUT:?}",
                    process.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        // After a Garrison restart the sandbox's DNS resolver is started
        // again here (status is polled); a no-op while it runs.
        if let Ok(dir) = self.sandbox_dir(&handle.name)
            && let Some(sandbox_net) = self.read_net(&dir)
            && let Err(e) = net::ensure_resolver(&self.net, &sandbox_net).await
        {
            tracing::warn!(sandbox = %handle.name, error = %e, "restarting the DNS resolver");
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
            .read_net(&dir)
            .ok_or_else(|| SandboxError::Gone(format!("network of {}", handle.name)))?;
        net::apply_policy(&self.net, &sandbox_net, policy).await
    }

    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()> {
        match self.process_status(handle, process) {
            Ok(ProcessStatus::Running) => {}
            Ok(_) => return Ok(()),
            Err(e) if e.is_gone() => return Ok(()),
            Err(e) => return Err(e),
        }
        self.signal(handle, process, Signal::SIGTERM)?;
        let deadline = tokio::time::Instant::now() + grace;
        while matches!(
            self.process_status(handle, process),
            Ok(ProcessStatus::Running)
        ) && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.signal(handle, process, Signal::SIGKILL)
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
        let snapshot = self
            .snapshots
            .new_ref(self.kind(), &handle.name, handle.image.clone());
        let archive_path = self.snapshots.archive_path(&snapshot)?;
        // Frozen, the layer cannot change under tar.
        let paused = self.runc.pause(&handle.name).await.is_ok();
        let packed =
            archive::pack(&dir.join("disk").join("upper"), ".garrison", &archive_path).await;
        if paused && let Err(e) = self.runc.resume(&handle.name).await {
            tracing::warn!(sandbox = handle.name, error = %e, "resuming after a snapshot failed");
        }
        let size = packed.map_err(|e| SandboxError::Transient(e.context("snapshot")))?;
        self.snapshots.record(snapshot, size)
    }

    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        self.snapshots.exists(snapshot)
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<()> {
        self.snapshots.delete(snapshot)
    }

    async fn snapshots_for(&self, name: &SandboxName) -> Result<Vec<SnapshotRef>> {
        self.snapshots.find_for(name)
    }

    async fn destroy(&self, handle: &Handle) -> Result<()> {
        let dir = self.sandbox_dir(&handle.name)?;
        if !dir.exists() && self.runc.state(&handle.name).await.is_none() {
            return Ok(());
        }
        self.teardown(&handle.name, &dir).await.map_err(fatal)
    }

    async fn list(&self) -> Result<Vec<Handle>> {
        list_handles(&self.config.root.join("sandboxes"), HANDLE_FILE)
    }

    fn gateway_url_for(&self, handle: &Handle, url: &str) -> String {
        match self
            .sandbox_dir(&handle.name)
            .ok()
            .and_then(|dir| self.read_net(&dir))
        {
            Some(sandbox_net) => net::rewrite_gateway_url(url, &sandbox_net),
            None => url.to_owned(),
        }
    }
}
