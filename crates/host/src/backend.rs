//! The host backend itself: sandboxes as directories, processes under
//! shims, snapshots as archives (the layout is in the crate's documentation).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use async_trait::async_trait;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use sandbox::{
    Capabilities, Handle, MachineInfo, ObjectStoreSettings, OutputChunk, ProcessRef, ProcessSpec,
    ProcessStatus, Result, Sandbox, SandboxError, SandboxName, SandboxSpec, SnapshotRef,
    SnapshotStore, format, is_plain_id, list_handles, read_chunk, read_handle,
};
use shim::{self, OUTPUT_FILE, ShimRequest};

use crate::archive::{pack, unpack};
use crate::executables::Executables;
use crate::files::{fatal, io_fatal, mkdir_private, write_file};
use crate::machine::{effective_user, host_chrome};
use crate::processes::{self, SHIM_PID_FILE};

const HANDLE_FILE: &str = "handle.json";

/// How long a shim may take to report that it started the process.
const SHIM_START_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the host backend keeps things and how it starts processes.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Holds `sandboxes/` and `executables/`.
    pub root: PathBuf,
    /// Holds snapshots; may be shared between Garrison processes. With an
    /// object store, only spools archives on their way.
    pub snapshot_dir: PathBuf,
    /// Keeps snapshots in an object store instead.
    pub snapshot_store: Option<ObjectStoreSettings>,
    /// A binary that becomes the shim when given [`shim::SHIM_ARG`]: the
    /// `garrison` binary itself in production.
    pub shim_exe: PathBuf,
}

/// The host backend: see the crate documentation.
pub struct HostBackend {
    config: HostConfig,
    snapshots: SnapshotStore,
    executables: Arc<Executables>,
}

impl HostBackend {
    /// Opens the backend, creating its directories (readable by Garrison's
    /// user only) and its snapshot store.
    pub fn new(config: HostConfig) -> anyhow::Result<Self> {
        for dir in [config.root.join("sandboxes"), config.snapshot_dir.clone()] {
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                .with_context(|| format!("restricting {}", dir.display()))?;
        }
        let snapshots = SnapshotStore::open(
            config.snapshot_dir.clone(),
            config.snapshot_store.as_ref(),
            "host",
        )?;
        let executables = Arc::new(Executables::open(config.root.join("executables"))?);
        Ok(Self {
            config,
            snapshots,
            executables,
        })
    }

    /// Unpacks `snapshot` into `target`, fetched from the store first.
    async fn restore(&self, snapshot: &SnapshotRef, target: PathBuf) -> Result<()> {
        let fetched = self.snapshots.fetch(snapshot).await?;
        let archive = fetched.path().to_owned();
        let unpacked = tokio::task::spawn_blocking(move || unpack(&archive, &target))
            .await
            .map_err(fatal);
        fetched.release().await;
        unpacked?
    }

    /// The sandbox's directories, its restored workspace and its handle, in
    /// `dir`; [`Sandbox::create`] removes `dir` if this fails.
    async fn make(&self, spec: &SandboxSpec, dir: &Path) -> Result<Handle> {
        let fs_root = dir.join("fs");
        for sub in ["workspace", "state", "bin", "home"] {
            mkdir_private(&fs_root.join(sub))?;
        }
        mkdir_private(&dir.join("proc"))?;
        if let Some(snapshot) = &spec.restore_from {
            self.restore(snapshot, fs_root.clone()).await?;
        }
        let path = |sub: &str| fs_root.join(sub).to_string_lossy().into_owned();
        let handle = Handle {
            backend: self.kind().to_owned(),
            id: spec.name.to_string(),
            name: spec.name.to_string(),
            labels: spec.labels.clone(),
            workdir: path("workspace"),
            state_dir: path("state"),
            bin_dir: path("bin"),
            home: path("home"),
            image: None,
        };
        let json = format::SANDBOX_HANDLE
            .to_vec_pretty(&handle)
            .map_err(fatal)?;
        shim::write_atomically(&dir.join(HANDLE_FILE), &json)
            .map_err(io_fatal(format!("writing {}", dir.display())))?;
        Ok(handle)
    }

    fn sandbox_dir(&self, name: &str) -> Result<PathBuf> {
        // Names come back from the store; only our own shape may name a path.
        let name = SandboxName::parse(name)
            .ok_or_else(|| SandboxError::Fatal(anyhow!("invalid sandbox name {name:?}")))?;
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

    fn process_dir(&self, handle: &Handle, process: &ProcessRef) -> Result<PathBuf> {
        if !is_plain_id(&process.id) {
            return Err(SandboxError::Fatal(anyhow!(
                "invalid process id {:?}",
                process.id
            )));
        }
        let dir = self.existing_dir(handle)?.join("proc").join(&process.id);
        if dir.exists() {
            Ok(dir)
        } else {
            Err(SandboxError::Gone(format!("process {}", process.id)))
        }
    }

    /// Maps a path as the sandbox sees it to the host, refusing anything that
    /// would land outside the sandbox's filesystem.
    fn resolve_inside(&self, handle: &Handle, path: &str) -> Result<PathBuf> {
        let fs_root = self.existing_dir(handle)?.join("fs");
        let path = Path::new(path);
        let relative = path.strip_prefix(&fs_root).map_err(|_| {
            SandboxError::Fatal(anyhow!(
                "{} is outside sandbox {}",
                path.display(),
                handle.name
            ))
        })?;
        if relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(SandboxError::Fatal(anyhow!(
                "{} escapes the sandbox",
                path.display()
            )));
        }
        Ok(fs_root.join(relative))
    }
}

#[async_trait]
impl Sandbox for HostBackend {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            os: sandbox::Os::Linux,
            // Sandboxes are directories on this machine.
            arch: sandbox::Arch::current(),
            suspend_keeps_memory: false,
            enforces_network_policy: false,
            snapshots: true,
        }
    }

    /// Processes run as Garrison's own user, on this machine: its name is
    /// looked up from the effective uid (not `$USER`, which whoever started
    /// Garrison may have set to anything), and the machine's Chrome/Chromium
    /// is the sandbox's browser. No desktop is provided.
    async fn machine(&self, _handle: &Handle) -> Result<MachineInfo> {
        Ok(MachineInfo {
            user: effective_user(),
            chrome_path: host_chrome(),
            display: None,
        })
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Handle> {
        let dir = self.sandbox_dir(spec.name.as_str())?;
        if dir.join(HANDLE_FILE).exists() {
            return Err(fatal(anyhow!("sandbox {} exists already", spec.name)));
        }
        if self.remove_remains(&spec.name).await? {
            tracing::warn!(sandbox = %spec.name, "removed the remains of an interrupted create or destroy");
        }
        let made = self.make(spec, &dir).await;
        if made.is_err() {
            // A create that failed part way (a full disk, a restore cut
            // off) leaves no directory: without a handle no `find` or
            // `list` would ever report it, so nothing would remove it.
            let remains = dir.clone();
            let _ = tokio::task::spawn_blocking(move || fs::remove_dir_all(&remains)).await;
        }
        made
    }

    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
        let target = self.resolve_inside(handle, path)?;
        // Writing and syncing a binary of megabytes blocks for as long as
        // the disk takes: off the async workers, or a burst of starts
        // stalls every other session.
        let bytes = bytes.to_vec();
        tokio::task::spawn_blocking(move || write_file(&target, &bytes, mode))
            .await
            .map_err(fatal)?
    }

    /// A hard link to one copy of the executable that every sandbox of this
    /// backend shares (see `executables`), so a start writes no binary: a
    /// burst of starts spent most of its time writing and syncing the same
    /// megabytes once per session. The host backend isolates nothing (each
    /// session can read and write all the Garrison user can, the stored copy
    /// too), so sharing one inode loses no isolation it had; the copy is
    /// read-only, and compared before each link with what was recorded when
    /// it was written, so one changed by accident is written again before
    /// the next session gets it. Where a link cannot be made, the bytes are
    /// written as [`Sandbox::put_file`] does.
    async fn put_executable(
        &self,
        handle: &Handle,
        path: &str,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<()> {
        let target = self.resolve_inside(handle, path)?;
        let executables = self.executables.clone();
        let sha256 = sha256.to_owned();
        // Most starts link a copy already stored, and need no copy of the
        // megabytes to take to the blocking pool.
        let linked = {
            let (executables, target, sha256) =
                (executables.clone(), target.clone(), sha256.clone());
            tokio::task::spawn_blocking(move || executables.link_stored(&target, &sha256))
                .await
                .map_err(fatal)??
        };
        if linked {
            return Ok(());
        }
        let bytes = bytes.to_vec();
        tokio::task::spawn_blocking(move || executables.put(&target, &bytes, &sha256, write_file))
            .await
            .map_err(fatal)?
    }

    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> Result<ProcessRef> {
        let cwd = self.resolve_inside(handle, &process.cwd)?;
        if !is_plain_id(&process.name) {
            return Err(fatal(anyhow!("invalid process name {:?}", process.name)));
        }
        let id = process.name.clone();
        let dir = self.existing_dir(handle)?.join("proc").join(&id);
        fs::create_dir(&dir).map_err(io_fatal(format!(
            "creating process directory {}",
            dir.display()
        )))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .map_err(io_fatal(format!("restricting {}", dir.display())))?;
        let request = ShimRequest {
            argv: process.argv.clone(),
            env: process
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cwd,
            dir: dir.clone(),
        };
        let request = serde_json::to_vec(&request).map_err(fatal)?;

        let mut child = tokio::process::Command::new(&self.config.shim_exe)
            .arg(shim::SHIM_ARG)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                fatal(
                    anyhow::Error::new(e)
                        .context(format!("starting shim {}", self.config.shim_exe.display())),
                )
            })?;
        let shim_pid = child
            .id()
            .ok_or_else(|| fatal(anyhow!("shim exited at once")))?;
        let record = format!(
            "{shim_pid} {}",
            shim::proc_start_time(shim_pid).unwrap_or(0)
        );
        shim::write_atomically(&dir.join(SHIM_PID_FILE), record.as_bytes())
            .map_err(io_fatal(format!("writing {}", dir.display())))?;

        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| fatal(anyhow!("shim stdin")))?;
        stdin.write_all(&request).await.map_err(fatal)?;
        drop(stdin);
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| fatal(anyhow!("shim stdout")))?;
        let mut line = String::new();
        tokio::time::timeout(
            SHIM_START_TIMEOUT,
            // The shim answers with one short line; nothing longer is read.
            BufReader::new(stdout.take(4096)).read_line(&mut line),
        )
        .await
        .map_err(|_| {
            SandboxError::Transient(anyhow!("shim did not report within {SHIM_START_TIMEOUT:?}"))
        })?
        .map_err(fatal)?;
        // The child handle is dropped without killing: the shim lives on, and
        // tokio reaps it if it exits while we run.
        drop(child);
        match line.trim_end().split_once(' ') {
            Some(("ok", _pid)) => Ok(ProcessRef { id }),
            Some(("err", message)) => Err(fatal(anyhow!("{message}"))),
            _ => Err(fatal(anyhow!("shim said {line:?}"))),
        }
    }

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        let dir = self.process_dir(handle, process)?;
        Ok(processes::process_status(&dir))
    }

    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()> {
        let dir = match self.process_dir(handle, process) {
            Ok(dir) => dir,
            Err(e) if e.is_gone() => return Ok(()),
            Err(e) => return Err(e),
        };
        processes::signal_group(&dir, Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + grace;
        while processes::process_status(&dir) == ProcessStatus::Running
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        processes::signal_group(&dir, Signal::SIGKILL);
        Ok(())
    }

    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        let path = self.process_dir(handle, process)?.join(OUTPUT_FILE);
        match fs::File::open(&path) {
            Ok(file) => read_chunk(file, offset, max),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(OutputChunk {
                data: Vec::new(),
                next_offset: offset,
            }),
            Err(e) => Err(io_fatal(format!("opening {}", path.display()))(e)),
        }
    }

    async fn snapshot(&self, handle: &Handle) -> Result<SnapshotRef> {
        let fs_root = self.existing_dir(handle)?.join("fs");
        let snapshot = self.snapshots.new_ref(
            self.kind(),
            &handle.name,
            handle.image.clone(),
            sandbox::Lineage::from_labels(&handle.labels),
        );
        let archive = self.snapshots.staging_path(&snapshot)?;
        let size = tokio::task::spawn_blocking(move || pack(&fs_root, &archive))
            .await
            .map_err(fatal)??;
        self.snapshots.record(snapshot, size).await
    }

    fn snapshot_store(&self) -> Option<&SnapshotStore> {
        Some(&self.snapshots)
    }

    async fn destroy(&self, handle: &Handle) -> Result<()> {
        let dir = self.sandbox_dir(&handle.name)?;
        if !dir.exists() {
            return Ok(());
        }
        let procs = processes::process_dirs(&dir);
        for proc_dir in &procs {
            processes::signal_group(proc_dir, Signal::SIGKILL);
        }
        // Wait for the shims to record the deaths, so nothing writes into
        // the directory while it is removed.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while procs
            .iter()
            .any(|p| processes::process_status(p) == ProcessStatus::Running)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Remove the handle first: a crash halfway leaves a directory that
        // `list` no longer reports but that the next destroy still removes.
        let _ = fs::remove_file(dir.join(HANDLE_FILE));
        let dir_for_removal = dir.clone();
        tokio::task::spawn_blocking(move || fs::remove_dir_all(&dir_for_removal))
            .await
            .map_err(fatal)?
            .or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .map_err(io_fatal(format!("removing {}", dir.display())))
    }

    async fn list(&self) -> Result<Vec<Handle>> {
        list_handles(&self.config.root.join("sandboxes"), HANDLE_FILE)
    }

    /// A directory without a handle: a create that crashed before it
    /// recorded the handle, or a destroy that crashed after removing it. No
    /// process of it runs (they start after the handle exists, and destroy
    /// killed them first).
    async fn remove_remains(&self, name: &SandboxName) -> Result<bool> {
        let dir = self.sandbox_dir(name.as_str())?;
        if !dir.exists() || dir.join(HANDLE_FILE).exists() {
            return Ok(false);
        }
        let remains = dir.clone();
        tokio::task::spawn_blocking(move || fs::remove_dir_all(&remains))
            .await
            .map_err(fatal)?
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .map_err(io_fatal(format!("removing {}", dir.display())))?;
        Ok(true)
    }

    /// One file read, where `list` reads every sandbox's.
    async fn find(&self, name: &SandboxName) -> Result<Option<Handle>> {
        let path = self.sandbox_dir(name.as_str())?.join(HANDLE_FILE);
        match fs::read(&path) {
            // As `list`: a handle that does not parse is no sandbox.
            Ok(bytes) => Ok(read_handle(&path, &bytes)?.filter(|h| h.name == name.as_str())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_fatal(format!("reading {}", path.display()))(e)),
        }
    }
}
