//! The `tensorlake` backend: one named Tensorlake sandbox per session.
//!
//! - The sandbox is named after the session's [`SandboxName`] (a hash of the
//!   session id: lowercase letters, digits, one hyphen), created with
//!   `auto_resume` off, sized by the outpost's resources, with
//!   `timeout_secs` idle seconds before Tensorlake suspends it, and with
//!   the egress rules of [`crate::policy::controls`] (the gateway
//!   allowed).
//! - Garrison keeps its directories under one root inside the sandbox
//!   ([`TensorlakeConfig::sandbox_root`]): `workspace/`, `state/`, `bin/`,
//!   `home/`, and `garrison-labels.json` (Tensorlake has no labels).
//! - Files go in through the files API; their mode is set by a short
//!   process (the files API has none), which also renames them into place
//!   so a replaced binary is never seen half-written.
//! - Processes are managed processes named after [`ProcessSpec::name`],
//!   never restarted by the daemon, with exactly the given environment.
//! - Every data-plane call first checks the sandbox: one Tensorlake
//!   suspended for idleness while its session runs is resumed (its
//!   `auto_resume` is off, so nothing else would wake it).
//! - [`Sandbox::suspend`] keeps memory and disk; [`Sandbox::resume`] reports
//!   [`SandboxError::Gone`] when the sandbox is no more, so the caller falls
//!   back to a snapshot and then to a fresh sandbox.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use sandbox::names::is_plain_id;
use sandbox::{
    Capabilities, Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Result, Sandbox,
    SandboxError, SandboxName, SandboxSpec, SnapshotRef,
};
use tracing::{info, warn};

use crate::client::{Client, found};
use crate::dataplane::{ProcessKey, SandboxClient};
use crate::error::Error;
use crate::models::{
    CreateSandbox, CreateSnapshot, NetworkConfig, ProcessInfo, ProcessState, Resources,
    RestartConfig, RestartPolicy, SandboxInfo, SandboxStatus, SnapshotStatus, SnapshotType,
    StartProcess,
};
use crate::retry::RetryPolicy;
use common::Secret;

const KIND: &str = "tensorlake";
const LABELS_FILE: &str = "garrison-labels.json";
/// The gateway's origin (scheme, host, port), kept with the labels so a
/// policy update keeps the gateway allowed.
const LABEL_GATEWAY: &str = "garrison.gateway";
/// Every process Garrison starts in a sandbox also appends its output
/// here (under the sandbox root), so that it can be followed from inside
/// the sandbox: `garrison logs -f` runs `tail -F` on it over the PTY
/// websocket. The daemon keeps the output it captures as before.
pub const OUTPUT_LOG: &str = "output.log";
/// Runs `"$@"` with its output (stdout and stderr) through `tee -a "$1"`:
/// a fifo, so the process is `exec`ed and keeps its pid, exit status and
/// signals; the shell's own exported variables are dropped, so the
/// process still sees exactly its environment. Without `mkfifo` or `tee`
/// the process simply runs.
const TEE_SCRIPT: &str = r#"log=$1; shift
if command -v mkfifo >/dev/null 2>&1 && command -v tee >/dev/null 2>&1; then
  fifo="$log.$$.fifo"
  rm -f "$fifo"
  if mkfifo -m 600 "$fifo"; then
    { rm -f "$fifo"; umask 077; exec tee -a "$log"; } <"$fifo" &
    unset PWD OLDPWD SHLVL _
    exec "$@" >"$fifo" 2>&1
  fi
fi
unset PWD OLDPWD SHLVL _
exec "$@""#;
/// Placeholder for the sandbox id in [`TensorlakeConfig::sandbox_root`].
pub const ID_PLACEHOLDER: &str = "{id}";
/// Where Garrison keeps its directories in a real Tensorlake sandbox.
pub const DEFAULT_SANDBOX_ROOT: &str = "/garrison";
/// `PATH` for the helper processes Garrison runs itself.
const HELPER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Bounds a wait for a state change; never an expectation of speed.
const TRANSITION_GUARD: Duration = Duration::from_secs(600);
/// Largest labels file read back from a sandbox.
const MAX_LABELS_BYTES: usize = 64 << 10;

/// How to reach Tensorlake and lay out its sandboxes.
#[derive(Clone, Debug)]
pub struct TensorlakeConfig {
    /// The lifecycle API, [`crate::DEFAULT_API_URL`] unless testing.
    pub api_url: String,
    pub api_key: Secret,
    /// The image sandboxes boot from when a spec names none.
    pub default_image: Option<String>,
    /// Idle seconds before Tensorlake suspends a sandbox (`timeout_secs`).
    pub timeout_secs: u64,
    /// Directory inside the sandbox that holds Garrison's directories;
    /// [`ID_PLACEHOLDER`] is replaced by the sandbox id (the mock runs every
    /// sandbox in its own host directory).
    pub sandbox_root: String,
    /// Holds a 0600 copy of each sandbox's labels, so `list` can name the
    /// session of a suspended sandbox without waking it.
    pub state_dir: PathBuf,
    pub retry: RetryPolicy,
}

/// The backend. Stateless apart from the label cache on disk: a new
/// instance with the same configuration picks up every sandbox.
pub struct TensorlakeBackend {
    client: Client,
    config: TensorlakeConfig,
}

impl TensorlakeBackend {
    pub fn new(config: TensorlakeConfig) -> anyhow::Result<Self> {
        let client = Client::with_retry(&config.api_url, config.api_key.clone(), config.retry)?;
        if !config.sandbox_root.starts_with('/') {
            anyhow::bail!(
                "the Tensorlake sandbox root {:?} must be an absolute path",
                config.sandbox_root
            );
        }
        let labels = config.state_dir.join("labels");
        std::fs::create_dir_all(&labels)?;
        set_private(&config.state_dir)?;
        set_private(&labels)?;
        Ok(Self { client, config })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The root of Garrison's directories in sandbox `id`.
    fn root(&self, id: &str) -> String {
        root_of(&self.config.sandbox_root, id)
    }

    fn handle_for(
        &self,
        id: &str,
        name: &str,
        labels: BTreeMap<String, String>,
        image: Option<String>,
    ) -> Handle {
        let root = self.root(id);
        Handle {
            backend: KIND.to_owned(),
            id: id.to_owned(),
            name: name.to_owned(),
            labels,
            workdir: format!("{root}/workspace"),
            state_dir: format!("{root}/state"),
            bin_dir: format!("{root}/bin"),
            home: format!("{root}/home"),
            image,
        }
    }

    fn labels_path(&self, name: &SandboxName) -> PathBuf {
        self.config
            .state_dir
            .join("labels")
            .join(format!("{name}.json"))
    }

    /// The sandbox as it is now, `Gone` when deleted or terminated.
    async fn info(&self, handle: &Handle) -> Result<SandboxInfo> {
        check_id(&handle.id)?;
        match found(self.client.get_sandbox(&handle.id).await).map_err(map_err)? {
            Some(info) if !info.status.is_final() => Ok(info),
            _ => Err(SandboxError::Gone(format!("sandbox {}", handle.name))),
        }
    }

    /// Waits until the sandbox runs, resuming it if Tensorlake suspended it.
    async fn running(&self, handle: &Handle) -> Result<SandboxInfo> {
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        loop {
            let info = self.info(handle).await?;
            match &info.status {
                SandboxStatus::Running => return Ok(info),
                SandboxStatus::Suspended => {
                    info!(sandbox = %handle.name, "resuming a sandbox Tensorlake suspended while its session runs");
                    match self.client.resume_sandbox(&handle.id).await {
                        Ok(()) => {}
                        Err(e) if e.is_conflict() => {}
                        Err(e) => return Err(map_err(e)),
                    }
                }
                _ => {}
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Transient(anyhow!(
                    "sandbox {} stayed {} for {TRANSITION_GUARD:?}",
                    handle.name,
                    info.status
                )));
            }
            poll.wait().await;
        }
    }

    /// The data-plane client of the sandbox if it runs now, `None` while it
    /// is pending, suspended or in transition: for following a session's
    /// output without waking its sandbox. `Gone` once it is deleted.
    pub async fn sandbox_if_running(&self, handle: &Handle) -> Result<Option<SandboxClient>> {
        let info = self.info(handle).await?;
        if info.status != SandboxStatus::Running {
            return Ok(None);
        }
        self.client
            .sandbox(&info.sandbox_id, info.sandbox_url.as_deref())
            .map(Some)
            .map_err(map_err)
    }

    /// The data-plane client of a running sandbox.
    async fn dataplane(&self, handle: &Handle) -> Result<SandboxClient> {
        let info = self.running(handle).await?;
        self.client
            .sandbox(&info.sandbox_id, info.sandbox_url.as_deref())
            .map_err(map_err)
    }

    /// Maps a path as the sandbox sees it, refusing anything outside
    /// Garrison's root or with `.`/`..` in it.
    fn inside(&self, handle: &Handle, path: &str) -> Result<String> {
        let root = self.root(&handle.id);
        let p = Path::new(path);
        let clean = p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !clean || !p.starts_with(&root) || p == Path::new(&root) {
            return Err(SandboxError::Fatal(anyhow!(
                "{path} is outside sandbox {}",
                handle.name
            )));
        }
        Ok(path.to_owned())
    }

    /// Runs a helper command to completion: its exit code and output.
    async fn run(&self, dp: &SandboxClient, argv: &[&str]) -> Result<(ProcessStatus, String)> {
        let (command, args) = argv.split_first().expect("a command");
        let started = dp
            .start_process(&StartProcess {
                command: (*command).to_owned(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                env: BTreeMap::from([("PATH".to_owned(), HELPER_PATH.to_owned())]),
                working_dir: None,
                name: None,
                restart: None,
            })
            .await
            .map_err(map_err)?;
        let key = ProcessKey::Pid(started.pid);
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        let status = loop {
            let info = dp.get_process(&key).await.map_err(map_err)?;
            match process_status(&info) {
                ProcessStatus::Running if tokio::time::Instant::now() < deadline => {
                    poll.wait().await
                }
                ProcessStatus::Running => {
                    return Err(SandboxError::Transient(anyhow!("{command} did not finish")));
                }
                done => break done,
            }
        };
        let output = dp.output(&key).await.map_err(map_err)?.lines.join("\n");
        Ok((status, output))
    }

    async fn run_ok(&self, dp: &SandboxClient, argv: &[&str]) -> Result<()> {
        match self.run(dp, argv).await? {
            (ProcessStatus::Exited(0), _) => Ok(()),
            (status, output) => Err(SandboxError::Fatal(anyhow!(
                "{} in the sandbox: {status:?}: {}",
                argv.join(" "),
                output.chars().take(2000).collect::<String>()
            ))),
        }
    }

    /// Creates Garrison's directories and writes the labels.
    async fn prepare(&self, handle: &Handle) -> Result<()> {
        let dp = self.dataplane(handle).await?;
        let root = self.root(&handle.id);
        self.run_ok(
            &dp,
            &[
                "mkdir",
                "-p",
                "-m",
                "700",
                &handle.workdir,
                &handle.state_dir,
                &handle.bin_dir,
                &handle.home,
            ],
        )
        .await?;
        let labels =
            serde_json::to_vec(&handle.labels).map_err(|e| SandboxError::Fatal(e.into()))?;
        dp.put_file(&format!("{root}/{LABELS_FILE}"), &labels)
            .await
            .map_err(map_err)
    }

    async fn wait_created(&self, handle: &Handle) -> Result<()> {
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        loop {
            let info = self.info(handle).await.map_err(|e| match e {
                SandboxError::Gone(_) => {
                    SandboxError::Fatal(anyhow!("sandbox {} ended while starting", handle.name))
                }
                other => other,
            })?;
            match info.status {
                SandboxStatus::Running => return Ok(()),
                SandboxStatus::Pending | SandboxStatus::Unknown(_)
                    if tokio::time::Instant::now() < deadline =>
                {
                    poll.wait().await
                }
                other => {
                    return Err(SandboxError::Fatal(anyhow!(
                        "sandbox {} is {other} instead of running",
                        handle.name
                    )));
                }
            }
        }
    }

    fn save_labels(&self, name: &SandboxName, labels: &BTreeMap<String, String>) {
        let path = self.labels_path(name);
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let tmp = path.with_extension("tmp");
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&serde_json::to_vec(labels)?)?;
            std::fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            warn!(sandbox = %name, error = %e, "could not cache the sandbox's labels");
        }
    }

    async fn labels_of(&self, name: &SandboxName, info: &SandboxInfo) -> BTreeMap<String, String> {
        if let Ok(bytes) = std::fs::read(self.labels_path(name))
            && bytes.len() <= MAX_LABELS_BYTES
            && let Ok(labels) = serde_json::from_slice(&bytes)
        {
            return labels;
        }
        // Another Garrison made it: read the copy inside, if that does not
        // wake it.
        if info.status == SandboxStatus::Running
            && let Ok(dp) = self
                .client
                .sandbox(&info.sandbox_id, info.sandbox_url.as_deref())
            && let Ok(bytes) = dp
                .get_file(&format!("{}/{LABELS_FILE}", self.root(&info.sandbox_id)))
                .await
            && bytes.len() <= MAX_LABELS_BYTES
            && let Ok(labels) = serde_json::from_slice(&bytes)
        {
            return labels;
        }
        BTreeMap::new()
    }

    fn network(&self, spec: &SandboxSpec) -> Result<Option<NetworkConfig>> {
        let gateway = match &spec.network.gateway_url {
            Some(url) => Some(gateway_of(url)?),
            None => None,
        };
        if let Some(g) = &gateway
            && !self.client.is_loopback()
            && is_loopback_host(&g.host)
        {
            return Err(SandboxError::Fatal(anyhow!(
                "the gateway {} is on this machine's loopback, which a Tensorlake sandbox \
                 cannot reach; serve the gateway on an address the sandbox can dial",
                g.host
            )));
        }
        let mapped = crate::policy::controls(&spec.network.policy, gateway.as_ref());
        for left_out in &mapped.unsupported {
            warn!(rule = %left_out.rule, reason = %left_out.reason, "network rule left out on Tensorlake");
        }
        let open = mapped.allow_internet_access
            && mapped.allow_out.is_empty()
            && mapped.deny_out.is_empty();
        Ok((!open).then_some(NetworkConfig {
            allow_internet_access: mapped.allow_internet_access,
            allow_out: mapped.allow_out,
            deny_out: mapped.deny_out,
        }))
    }

    /// After a create refused because the name is taken: the holder is a
    /// leftover of this session (the caller holds its claim and found no
    /// sandbox under that name, so one made by a create whose answer was
    /// lost), so it is deleted and the create is for the caller to retry.
    async fn clear_name(&self, name: &SandboxName, refused: Error) -> SandboxError {
        let holders = match self.client.list_sandboxes().await {
            Ok(all) => all,
            Err(e) => return map_err(e),
        };
        for info in holders {
            if info.name.as_deref() == Some(name.as_str())
                && !info.status.is_final()
                && plain(&info.sandbox_id)
            {
                warn!(sandbox = %name, id = info.sandbox_id, "deleting a leftover sandbox that holds the session's name");
                if let Err(e) = found(self.client.delete_sandbox(&info.sandbox_id).await) {
                    return map_err(e);
                }
            }
        }
        SandboxError::Transient(anyhow!(
            "sandbox name {name} was taken ({refused}); the leftover was deleted, create again"
        ))
    }

    /// Suspends (`target` suspended) or resumes (running) and waits for it,
    /// asking again when a request is refused mid-transition (409).
    async fn transition(&self, handle: &Handle, target: SandboxStatus) -> Result<()> {
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        let mut asked = false;
        loop {
            let info = self.info(handle).await?;
            if info.status == target {
                return Ok(());
            }
            let settled = matches!(
                info.status,
                SandboxStatus::Running | SandboxStatus::Suspended
            );
            if settled && !asked {
                let request = if target == SandboxStatus::Suspended {
                    self.client.suspend_sandbox(&handle.id).await
                } else {
                    self.client.resume_sandbox(&handle.id).await
                };
                match request {
                    Ok(()) => asked = true,
                    Err(e) if e.is_conflict() => {}
                    Err(e) => return Err(map_err(e)),
                }
            } else if settled && asked && info.status != target {
                // Something else moved it back (an idle suspend): ask again.
                asked = false;
                continue;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SandboxError::Transient(anyhow!(
                    "sandbox {} did not become {target} (it is {})",
                    handle.name,
                    info.status
                )));
            }
            poll.wait().await;
        }
    }
}

#[async_trait]
impl Sandbox for TensorlakeBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            suspend_keeps_memory: true,
            enforces_network_policy: true,
            snapshots: true,
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Handle> {
        let network = self.network(spec)?;
        let snapshot_id = match &spec.restore_from {
            Some(s) => {
                let id = s.id_for(KIND)?;
                check_id(id)?;
                Some(id.to_owned())
            }
            None => None,
        };
        let image = spec.image.clone().or(self.config.default_image.clone());
        let request = CreateSandbox {
            image: image.clone(),
            resources: Resources {
                cpus: spec.resources.cpus,
                memory_mb: spec.resources.memory_mb,
                disk_mb: Some(spec.resources.disk_mb),
            },
            timeout_secs: Some(self.config.timeout_secs),
            network,
            snapshot_id: snapshot_id.clone(),
            name: Some(spec.name.to_string()),
            auto_resume: Some(false),
        };
        let created = match self.client.create_sandbox(&request).await {
            Ok(created) => created,
            Err(e) if e.is_not_found() && snapshot_id.is_some() => {
                return Err(SandboxError::Gone(format!(
                    "snapshot {}",
                    snapshot_id.unwrap_or_default()
                )));
            }
            Err(e) if e.is_conflict() => return Err(self.clear_name(&spec.name, e).await),
            Err(e) => return Err(map_err(e)),
        };
        check_id(&created.sandbox_id)?;
        let mut labels = spec.labels.clone();
        if let Some(origin) = spec.network.gateway_url.as_deref().and_then(gateway_origin) {
            labels.insert(LABEL_GATEWAY.to_owned(), origin);
        }
        self.save_labels(&spec.name, &labels);
        let handle = self.handle_for(&created.sandbox_id, spec.name.as_str(), labels, image);
        let ready = async {
            self.wait_created(&handle).await?;
            self.prepare(&handle).await
        };
        if let Err(e) = ready.await {
            // Leave nothing behind a failed create.
            let _ = self.destroy(&handle).await;
            return Err(e);
        }
        Ok(handle)
    }

    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
        let target = self.inside(handle, path)?;
        let dp = self.dataplane(handle).await?;
        let tmp = format!("{target}.garrison-{:08x}", rand::random::<u32>());
        dp.put_file(&tmp, bytes).await.map_err(map_err)?;
        let mode = format!("{:o}", mode & 0o7777);
        self.run_ok(
            &dp,
            &[
                "/bin/sh",
                "-c",
                "chmod \"$1\" \"$2\" && mv -f \"$2\" \"$3\"",
                "sh",
                &mode,
                &tmp,
                &target,
            ],
        )
        .await
    }

    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> Result<ProcessRef> {
        if !is_plain_id(&process.name) || process.name.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SandboxError::Fatal(anyhow!(
                "invalid process name {:?}",
                process.name
            )));
        }
        let cwd = self.inside(handle, &process.cwd)?;
        let (command, args) = process
            .argv
            .split_first()
            .ok_or_else(|| SandboxError::Fatal(anyhow!("empty argv")))?;
        let dp = self.dataplane(handle).await?;
        let log = format!("{}/{OUTPUT_LOG}", self.root(&handle.id));
        let mut wrapped = vec!["-c".to_owned(), TEE_SCRIPT.to_owned(), "sh".to_owned(), log];
        wrapped.push(command.clone());
        wrapped.extend(args.iter().cloned());
        let request = StartProcess {
            command: "/bin/sh".to_owned(),
            args: wrapped,
            env: process.env.clone(),
            working_dir: Some(cwd),
            name: Some(process.name.clone()),
            restart: Some(RestartConfig {
                policy: RestartPolicy::Never,
            }),
        };
        match dp.start_process(&request).await {
            Ok(_) => Ok(ProcessRef {
                id: process.name.clone(),
            }),
            Err(e) if e.is_conflict() => Err(SandboxError::Fatal(anyhow!(
                "a process named {} exists already in sandbox {}",
                process.name,
                handle.name
            ))),
            Err(e) => Err(map_err(e)),
        }
    }

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        let key = process_key(process)?;
        let dp = self.dataplane(handle).await?;
        match found(dp.get_process(&key).await).map_err(map_err)? {
            Some(info) => Ok(process_status(&info)),
            None => Err(SandboxError::Gone(format!("process {}", process.id))),
        }
    }

    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()> {
        let key = process_key(process)?;
        let dp = match self.dataplane(handle).await {
            Ok(dp) => dp,
            Err(e) if e.is_gone() => return Ok(()),
            Err(e) => return Err(e),
        };
        let signal = async |number: i32| match dp.signal_process(&key, number).await {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(false),
            Err(e) => Err(map_err(e)),
        };
        if !signal(signal_number::TERM).await? {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + grace;
        let mut poll = Poll::new();
        while tokio::time::Instant::now() < deadline {
            match found(dp.get_process(&key).await).map_err(map_err)? {
                Some(info) if process_status(&info) == ProcessStatus::Running => poll.wait().await,
                _ => return Ok(()),
            }
        }
        signal(signal_number::KILL).await?;
        Ok(())
    }

    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        let key = process_key(process)?;
        let dp = self.dataplane(handle).await?;
        let output = match found(dp.output(&key).await).map_err(map_err)? {
            Some(output) => output,
            None => return Err(SandboxError::Gone(format!("process {}", process.id))),
        };
        Ok(slice_lines(&output.lines, offset, max))
    }

    async fn snapshot(&self, handle: &Handle) -> Result<SnapshotRef> {
        self.running(handle).await?;
        let created = self
            .client
            .snapshot_sandbox(
                &handle.id,
                &CreateSnapshot {
                    snapshot_type: Some(SnapshotType::Filesystem),
                },
            )
            .await
            .map_err(map_err)?;
        check_id(&created.snapshot_id)?;
        let deadline = tokio::time::Instant::now() + TRANSITION_GUARD;
        let mut poll = Poll::new();
        loop {
            let info = self
                .client
                .get_snapshot(&created.snapshot_id)
                .await
                .map_err(map_err)?;
            match info.status {
                SnapshotStatus::Completed => {
                    return Ok(SnapshotRef {
                        backend: KIND.to_owned(),
                        id: created.snapshot_id,
                        size_bytes: info.size_bytes.unwrap_or(0).max(0) as u64,
                        created_at_ms: chrono_ms(),
                        base_image: info.base_image.or(handle.image.clone()),
                    });
                }
                SnapshotStatus::Failed => {
                    return Err(SandboxError::Fatal(anyhow!(
                        "snapshot {} failed: {}",
                        created.snapshot_id,
                        info.error.unwrap_or_default()
                    )));
                }
                _ if tokio::time::Instant::now() > deadline => {
                    return Err(SandboxError::Transient(anyhow!(
                        "snapshot {} still {}",
                        created.snapshot_id,
                        info.status
                    )));
                }
                _ => poll.wait().await,
            }
        }
    }

    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        if snapshot.backend != KIND || !plain(&snapshot.id) {
            return Ok(false);
        }
        Ok(
            match found(self.client.get_snapshot(&snapshot.id).await).map_err(map_err)? {
                Some(info) => info.status != SnapshotStatus::Failed,
                None => false,
            },
        )
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<()> {
        check_id(&snapshot.id)?;
        found(self.client.delete_snapshot(&snapshot.id).await).map_err(map_err)?;
        Ok(())
    }

    async fn destroy(&self, handle: &Handle) -> Result<()> {
        check_id(&handle.id)?;
        found(self.client.delete_sandbox(&handle.id).await).map_err(map_err)?;
        if let Some(name) = SandboxName::parse(&handle.name) {
            let _ = std::fs::remove_file(self.labels_path(&name));
        }
        Ok(())
    }

    async fn list(&self) -> Result<Vec<Handle>> {
        let mut out = Vec::new();
        for info in self.client.list_sandboxes().await.map_err(map_err)? {
            let Some(name) = info.name.as_deref().and_then(SandboxName::parse) else {
                continue;
            };
            if info.status.is_final() || !plain(&info.sandbox_id) {
                continue;
            }
            let labels = self.labels_of(&name, &info).await;
            out.push(self.handle_for(&info.sandbox_id, name.as_str(), labels, info.image.clone()));
        }
        Ok(out)
    }

    async fn update_network_policy(
        &self,
        handle: &Handle,
        policy: &common::NetworkPolicy,
    ) -> Result<()> {
        let spec = SandboxSpec {
            name: SandboxName::parse(&handle.name)
                .ok_or_else(|| SandboxError::Fatal(anyhow!("sandbox name {:?}", handle.name)))?,
            labels: BTreeMap::new(),
            image: None,
            restore_from: None,
            resources: Default::default(),
            network: sandbox::NetworkSpec {
                policy: policy.clone(),
                // The gateway stays allowed whatever the new policy says.
                gateway_url: handle.labels.get(LABEL_GATEWAY).cloned(),
            },
        };
        let network = self.network(&spec)?.unwrap_or(NetworkConfig {
            allow_internet_access: true,
            ..NetworkConfig::default()
        });
        self.client
            .update_network(&handle.id, &network)
            .await
            .map_err(map_err)
    }

    async fn suspend(&self, handle: &Handle) -> Result<()> {
        self.transition(handle, SandboxStatus::Suspended).await
    }

    async fn resume(&self, handle: &Handle) -> Result<()> {
        self.transition(handle, SandboxStatus::Running).await
    }
}

/// The root of Garrison's directories in sandbox `id`, from the
/// [`TensorlakeConfig::sandbox_root`] template.
pub fn root_of(sandbox_root: &str, id: &str) -> String {
    sandbox_root
        .replace(ID_PLACEHOLDER, id)
        .trim_end_matches('/')
        .to_owned()
}

/// Where the output of sandbox `id`'s processes is appended ([`OUTPUT_LOG`]).
pub fn output_log_of(sandbox_root: &str, id: &str) -> String {
    format!("{}/{OUTPUT_LOG}", root_of(sandbox_root, id))
}

/// Signal numbers (Linux): the daemon takes numbers.
mod signal_number {
    pub const TERM: i32 = 15;
    pub const KILL: i32 = 9;
}

/// What became of a process, from the daemon's report.
pub fn process_status(info: &ProcessInfo) -> ProcessStatus {
    let code = |c: i64| ProcessStatus::Exited(c.clamp(i32::MIN as i64, i32::MAX as i64) as i32);
    match (&info.status, info.exit_code, info.signal) {
        (ProcessState::Running, _, _) => ProcessStatus::Running,
        (ProcessState::OomKilled, _, _) => ProcessStatus::Exited(128 + 9),
        (_, _, Some(signal)) if (1..64).contains(&signal) => code(128 + signal),
        (_, Some(exit), _) => code(exit),
        (ProcessState::Exited | ProcessState::Signaled, None, _) => ProcessStatus::Lost,
        // A state this client does not know, with no exit: not ended.
        (ProcessState::Unknown(_), None, _) => ProcessStatus::Running,
    }
}

/// Bytes `[offset, offset + max)` of the output, lines joined by `\n`.
pub fn slice_lines(lines: &[String], offset: u64, max: usize) -> OutputChunk {
    let mut data = Vec::new();
    let mut position = 0u64;
    for line in lines {
        for bytes in [line.as_bytes(), b"\n"] {
            let end = position + bytes.len() as u64;
            if end > offset && data.len() < max {
                let from = offset.saturating_sub(position) as usize;
                let take = (bytes.len() - from).min(max - data.len());
                data.extend_from_slice(&bytes[from..from + take]);
            }
            position = end;
        }
        if data.len() >= max {
            break;
        }
    }
    OutputChunk {
        next_offset: offset + data.len() as u64,
        data,
    }
}

fn process_key(process: &ProcessRef) -> Result<ProcessKey> {
    if is_plain_id(&process.id) && !process.id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(ProcessKey::Name(process.id.clone()))
    } else {
        Err(SandboxError::Fatal(anyhow!(
            "invalid process id {:?}",
            process.id
        )))
    }
}

fn plain(id: &str) -> bool {
    is_plain_id(id)
}

fn check_id(id: &str) -> Result<()> {
    if plain(id) {
        Ok(())
    } else {
        Err(SandboxError::Fatal(anyhow!("invalid Tensorlake id {id:?}")))
    }
}

fn gateway_of(url: &str) -> Result<sandbox::policy::Gateway> {
    sandbox::policy::Gateway::from_url(url).ok_or_else(|| {
        SandboxError::Fatal(anyhow!("gateway URL {url:?} does not parse or has no host"))
    })
}

/// `scheme://host[:port]` of a gateway URL: what the policy needs, without
/// its path or query.
fn gateway_origin(url: &str) -> Option<String> {
    let origin = url::Url::parse(url).ok()?.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn map_err(e: Error) -> SandboxError {
    if e.is_not_found() {
        SandboxError::Gone(e.to_string())
    } else if e.is_transient() {
        SandboxError::Transient(e.into())
    } else {
        SandboxError::Fatal(e.into())
    }
}

fn set_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn chrono_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Polling with a growing pause: quick at first, gentle later.
struct Poll(Duration);

impl Poll {
    fn new() -> Self {
        Self(Duration::from_millis(20))
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_slices_by_byte_offset() {
        let lines = vec!["hello".to_owned(), "oops".to_owned()];
        let all = slice_lines(&lines, 0, 1024);
        assert_eq!(all.data, b"hello\noops\n");
        assert_eq!(all.next_offset, 11);
        let part = slice_lines(&lines, 3, 4);
        assert_eq!(part.data, b"lo\no");
        assert_eq!(part.next_offset, 7);
        assert!(slice_lines(&lines, 11, 10).data.is_empty());
    }

    #[test]
    fn exit_codes() {
        let info = |status: &str, exit_code, signal| ProcessInfo {
            pid: 1,
            status: ProcessState::from(status),
            exit_code,
            signal,
            command: None,
            args: Vec::new(),
            started_at: None,
            managed: None,
        };
        assert_eq!(
            process_status(&info("running", None, None)),
            ProcessStatus::Running
        );
        assert_eq!(
            process_status(&info("exited", Some(3), None)),
            ProcessStatus::Exited(3)
        );
        assert_eq!(
            process_status(&info("signaled", None, Some(15))),
            ProcessStatus::Exited(143)
        );
        assert_eq!(
            process_status(&info("exited", None, None)),
            ProcessStatus::Lost
        );
        assert_eq!(
            process_status(&info("zombie", None, None)),
            ProcessStatus::Running
        );
        assert_eq!(
            process_status(&info("zombie", Some(1), None)),
            ProcessStatus::Exited(1)
        );
    }
}
