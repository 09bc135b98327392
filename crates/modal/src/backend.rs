//! [`ModalBackend`]: one Modal Sandbox per Garrison sandbox.
//!
//! Sandboxes of an outpost live in one Modal app (`garrison-<outpost>` by
//! default), carry the labels as Modal sandbox tags (so [`Sandbox::list`]
//! finds what a crash left behind) and the sandbox name as their Modal name
//! (so a second sandbox of the same name is refused by Modal itself).
//! Processes are run through `ContainerExec` as described in
//! [`crate::scripts`]; a snapshot is a Modal filesystem snapshot, i.e. an
//! image id a later sandbox starts from.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use sandbox::names::is_plain_id;
use sandbox::{
    Capabilities, Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Result, Sandbox,
    SandboxError, SandboxSpec, SnapshotRef, policy,
};
use tonic::{Code, Status};
use tracing::warn;

use crate::client::{Client, ClientConfig};
use crate::exec::{self, Command};
use crate::image;
use crate::scripts::{self, Reported};
use crate::wire;

/// Tag holding the absolute directory Garrison uses inside the sandbox.
const TAG_ROOT: &str = "garrison.root";
/// Output kept from a helper command (status lines, error messages).
const HELPER_OUTPUT: usize = 64 * 1024;
/// How long one `SandboxGetTaskId` may wait for the sandbox to be scheduled.
const SCHEDULE_WAIT_SECS: f32 = 55.0;
/// How long a filesystem snapshot may take on Modal's side per call.
const SNAPSHOT_WAIT_SECS: f32 = 55.0;
/// `SandboxWait` calls after a terminate, and how long each may wait.
const TERMINATE_WAITS: u32 = 3;
const TERMINATE_WAIT_SECS: f32 = 20.0;
/// Modal's longest sandbox lifetime.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How sandboxes are made on Modal.
#[derive(Clone, Debug)]
pub struct ModalSettings {
    /// How to reach Modal.
    pub client: ClientConfig,
    /// When set, [`Sandbox::list`] reports only this outpost's sandboxes
    /// (from its app); otherwise every Garrison sandbox of the account's
    /// environment.
    pub outpost_id: Option<String>,
    /// The image sandboxes start from when the spec names none: a Modal
    /// image id (`im-...`) or a name built by `garrison image build
    /// --backend modal`; `None` is the name [`DEFAULT_IMAGE`].
    pub image: Option<String>,
    /// Where image names are looked up (see [`crate::image::ImageCache`]).
    pub image_cache: Option<PathBuf>,
    /// Where Modal may place sandboxes; empty lets Modal choose.
    pub regions: Vec<String>,
    /// A sandbox's maximum lifetime (Modal terminates it then).
    pub timeout: Duration,
}

/// The image name used when none is configured, as for the local backend.
pub const DEFAULT_IMAGE: &str = "default";

/// The Modal app holding an outpost's sandboxes.
pub fn app_name_for(outpost_id: &str) -> String {
    let clean: String = outpost_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(54)
        .collect();
    format!("garrison-{clean}")
}

/// The [`Sandbox`] implementation on Modal (see the module documentation).
pub struct ModalBackend {
    client: Client,
    settings: ModalSettings,
    /// App ids by app name, looked up once.
    apps: Mutex<HashMap<String, String>>,
}

impl ModalBackend {
    /// A backend for `settings`; Modal is first called when it is used.
    pub fn new(settings: ModalSettings) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !settings.timeout.is_zero() && settings.timeout <= MAX_TIMEOUT,
            "the Modal sandbox timeout must be between 1 second and 24 hours"
        );
        Ok(Self {
            client: Client::new(&settings.client)?,
            settings,
            apps: Mutex::new(HashMap::new()),
        })
    }

    /// The id of the app `app_name`, made if missing.
    async fn app_id(&self, app_name: &str) -> Result<String> {
        if let Some(id) = self.apps.lock().unwrap().get(app_name) {
            return Ok(id.clone());
        }
        let request = wire::AppGetOrCreateRequest {
            app_name: app_name.to_owned(),
            environment_name: String::new(),
            object_creation_type: wire::ObjectCreationType::CreateIfMissing as i32,
        };
        let id = self
            .client
            .retrying("AppGetOrCreate", |mut rpc| {
                let request = request.clone();
                async move { rpc.app_get_or_create(request).await }
            })
            .await
            .map(|r| r.app_id)
            .map_err(|s| status_error("looking up the Modal app", s))?;
        self.apps
            .lock()
            .unwrap()
            .insert(app_name.to_owned(), id.clone());
        Ok(id)
    }

    /// The image id for a configured image id or name.
    fn image_id(&self, wanted: Option<&str>) -> Result<String> {
        let wanted = wanted
            .or(self.settings.image.as_deref())
            .unwrap_or(DEFAULT_IMAGE);
        if image::is_image_id(wanted) {
            return Ok(wanted.to_owned());
        }
        let missing = || {
            SandboxError::Fatal(anyhow!(
                "no Modal image named {wanted:?}: build it with \
                 `garrison image build {wanted} --backend modal`, or set MODAL_IMAGE to an image id"
            ))
        };
        let path = self.settings.image_cache.as_deref().ok_or_else(missing)?;
        let cache = image::ImageCache::load(path).map_err(SandboxError::Fatal)?;
        cache
            .image_for(wanted)
            .map(str::to_owned)
            .ok_or_else(missing)
    }

    /// The running task of a sandbox; gone once the sandbox has finished.
    async fn task_id(&self, sandbox_id: &str) -> Result<String> {
        let request = wire::SandboxGetTaskIdRequest {
            sandbox_id: sandbox_id.to_owned(),
            timeout: Some(SCHEDULE_WAIT_SECS),
            wait_until_ready: false,
        };
        let response = self
            .client
            .retrying("SandboxGetTaskId", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_get_task_id(request).await }
            })
            .await
            .map_err(|s| status_error("finding the sandbox's task", s))?;
        if response.task_result.is_some() {
            return Err(SandboxError::Gone(format!(
                "sandbox {sandbox_id} has ended"
            )));
        }
        response.task_id.ok_or_else(|| {
            SandboxError::Transient(anyhow!("sandbox {sandbox_id} is not scheduled yet"))
        })
    }

    async fn run(
        &self,
        handle: &Handle,
        argv: Vec<String>,
        workdir: Option<String>,
        stdin: Option<&[u8]>,
        max_output: usize,
    ) -> Result<exec::Finished> {
        let task = self.task_id(&handle.id).await?;
        exec::run(
            &self.client,
            &task,
            &Command { argv, workdir },
            stdin,
            max_output,
        )
        .await
        .map_err(|s| status_error("running a command in the sandbox", s))
    }

    async fn terminate(&self, sandbox_id: &str) -> Result<()> {
        let request = wire::SandboxTerminateRequest {
            sandbox_id: sandbox_id.to_owned(),
        };
        match self
            .client
            .retrying("SandboxTerminate", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_terminate(request).await }
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(status_error("terminating the sandbox", s)),
        }
    }

    /// Creates the layout and returns the absolute root inside the sandbox.
    async fn prepare(&self, sandbox_id: &str) -> Result<String> {
        let task = self.task_id(sandbox_id).await?;
        let argv = scripts::sh(scripts::SETUP, []);
        let finished = exec::run(
            &self.client,
            &task,
            &Command {
                argv,
                workdir: None,
            },
            None,
            4096,
        )
        .await
        .map_err(|s| status_error("preparing the sandbox", s))?;
        let root = String::from_utf8_lossy(&finished.output).trim().to_owned();
        if finished.exit_code != 0 || !root.starts_with('/') || root.contains('\n') {
            return Err(SandboxError::Fatal(anyhow!(
                "preparing the sandbox failed ({}): {root}",
                finished.exit_code
            )));
        }
        Ok(root)
    }

    async fn set_tags(&self, sandbox_id: &str, tags: Vec<wire::SandboxTag>) -> Result<()> {
        let request = wire::SandboxTagsSetRequest {
            environment_name: String::new(),
            sandbox_id: sandbox_id.to_owned(),
            tags,
        };
        self.client
            .retrying("SandboxTagsSet", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_tags_set(request).await }
            })
            .await
            .map(|_| ())
            .map_err(|s| status_error("tagging the sandbox", s))
    }

    fn network_access(&self, spec: &SandboxSpec) -> wire::NetworkAccess {
        let gateway = spec
            .network
            .gateway_url
            .as_deref()
            .and_then(policy::Gateway::from_url);
        let mapped = crate::policy::controls(&spec.network.policy, gateway.as_ref());
        for left_out in &mapped.unsupported {
            warn!(sandbox = %spec.name, rule = left_out.rule, reason = left_out.reason, "network rule left out on Modal");
        }
        network_access(&mapped)
    }
}

/// The gateway's host and port from its URL.
/// Modal's `NetworkAccess` for a mapped policy.
pub fn network_access(mapped: &crate::policy::Controls) -> wire::NetworkAccess {
    use wire::network_access::NetworkAccessType;
    let (kind, cidrs, domains) = match (&mapped.cidr_allowlist, mapped.block_network) {
        (_, true) => (NetworkAccessType::Blocked, Vec::new(), Vec::new()),
        (Some(cidrs), false) => (
            NetworkAccessType::Allowlist,
            cidrs.clone(),
            mapped.domain_allowlist.clone(),
        ),
        (None, false) => (NetworkAccessType::Open, Vec::new(), Vec::new()),
    };
    wire::NetworkAccess {
        network_access_type: kind as i32,
        allowed_cidrs: cidrs,
        allowed_domains: domains,
    }
}

/// Maps a Modal status onto the orchestrator's error kinds.
fn status_error(doing: &str, status: Status) -> SandboxError {
    let message = format!(
        "{doing}: Modal said {:?}: {}",
        status.code(),
        status.message()
    );
    match status.code() {
        Code::NotFound => SandboxError::Gone(message),
        Code::ResourceExhausted => SandboxError::Transient(anyhow!(message)),
        code if wire::is_retryable(code) => SandboxError::Transient(anyhow!(message)),
        _ => SandboxError::Fatal(anyhow!(message)),
    }
}

fn root_of(handle: &Handle) -> Result<&str> {
    handle
        .workdir
        .strip_suffix("/workspace")
        // The root comes back from Modal as a tag: plain absolute paths only.
        .filter(|root| {
            root.len() > 1
                && root.starts_with('/')
                && root[1..]
                    .split('/')
                    .all(|part| !part.is_empty() && part != "." && part != "..")
        })
        .ok_or_else(|| SandboxError::Fatal(anyhow!("not a Modal sandbox handle: {}", handle.name)))
}

fn process_dir(handle: &Handle, process: &str) -> Result<String> {
    if !is_plain_id(process) {
        return Err(SandboxError::Fatal(anyhow!(
            "invalid process id {process:?}"
        )));
    }
    Ok(format!("{}/proc/{process}", root_of(handle)?))
}

fn handle_for(
    id: String,
    name: String,
    image: Option<String>,
    root: &str,
    labels: BTreeMap<String, String>,
) -> Handle {
    Handle {
        backend: "modal".to_owned(),
        id,
        name,
        labels,
        workdir: format!("{root}/workspace"),
        state_dir: format!("{root}/state"),
        bin_dir: format!("{root}/bin"),
        home: format!("{root}/home"),
        image,
    }
}

fn tags(labels: &BTreeMap<String, String>) -> Vec<wire::SandboxTag> {
    labels
        .iter()
        .map(|(k, v)| wire::SandboxTag {
            tag_name: k.clone(),
            tag_value: v.clone(),
        })
        .collect()
}

#[async_trait]
impl Sandbox for ModalBackend {
    fn kind(&self) -> &'static str {
        "modal"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            suspend_keeps_memory: false,
            enforces_network_policy: true,
            snapshots: true,
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Handle> {
        let image = match &spec.restore_from {
            Some(snapshot) => snapshot.id_for("modal")?.to_owned(),
            None => self.image_id(spec.image.as_deref())?,
        };
        let outpost = spec
            .labels
            .get(sandbox::LABEL_OUTPOST_ID)
            .map_or("default", String::as_str);
        let app_id = self.app_id(&app_name_for(outpost)).await?;
        let definition = wire::Sandbox {
            entrypoint_args: scripts::entrypoint(),
            image_id: image.clone(),
            resources: Some(wire::Resources {
                memory_mb: u32::try_from(spec.resources.memory_mb).unwrap_or(u32::MAX),
                milli_cpu: (spec.resources.cpus * 1000.0)
                    .round()
                    .clamp(1.0, u32::MAX as f64) as u32,
            }),
            timeout_secs: self.settings.timeout.as_secs() as u32,
            workdir: None,
            block_network: false,
            scheduler_placement: (!self.settings.regions.is_empty()).then(|| {
                wire::SchedulerPlacement {
                    regions: self.settings.regions.clone(),
                }
            }),
            network_access: Some(self.network_access(spec)),
            name: Some(spec.name.to_string()),
        };
        let request = wire::SandboxCreateRequest {
            app_id,
            definition: Some(definition),
            tags: tags(&spec.labels),
        };
        let created = self
            .client
            .retrying_creation("SandboxCreate", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_create(request).await }
            })
            .await
            .map_err(|s| match s.code() {
                Code::AlreadyExists => {
                    SandboxError::Fatal(anyhow!("sandbox {} exists already", spec.name))
                }
                Code::NotFound if spec.restore_from.is_some() => {
                    SandboxError::Gone(format!("snapshot image {image}: {}", s.message()))
                }
                _ => status_error("creating the sandbox", s),
            })?;
        let sandbox_id = created.sandbox_id;
        let ready = async {
            let root = self.prepare(&sandbox_id).await?;
            let mut all = tags(&spec.labels);
            all.push(wire::SandboxTag {
                tag_name: TAG_ROOT.to_owned(),
                tag_value: root.clone(),
            });
            self.set_tags(&sandbox_id, all).await?;
            Ok::<_, SandboxError>(root)
        }
        .await;
        match ready {
            Ok(root) => Ok(handle_for(
                sandbox_id,
                spec.name.to_string(),
                Some(image),
                &root,
                spec.labels.clone(),
            )),
            Err(e) => {
                // Leave nothing behind that the caller does not know about.
                if let Err(t) = self.terminate(&sandbox_id).await {
                    warn!(sandbox_id, error = %t, "terminating a half-made sandbox failed");
                }
                Err(e)
            }
        }
    }

    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
        if !scripts::inside(root_of(handle)?, path) {
            return Err(SandboxError::Fatal(anyhow!(
                "{path} is outside sandbox {}",
                handle.name
            )));
        }
        let argv = scripts::sh(
            scripts::WRITE,
            [path.to_owned(), format!("{:o}", mode & 0o7777)],
        );
        let finished = self
            .run(handle, argv, None, Some(bytes), HELPER_OUTPUT)
            .await?;
        if finished.exit_code != 0 {
            return Err(SandboxError::Fatal(anyhow!(
                "writing {path} failed ({}): {}",
                finished.exit_code,
                String::from_utf8_lossy(&finished.output).trim()
            )));
        }
        Ok(())
    }

    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> Result<ProcessRef> {
        let dir = process_dir(handle, &process.name)?;
        let root = root_of(handle)?;
        if process.cwd != root && !scripts::inside(root, &process.cwd) {
            return Err(SandboxError::Fatal(anyhow!(
                "{} is outside sandbox {}",
                process.cwd,
                handle.name
            )));
        }
        if process.argv.is_empty() {
            return Err(SandboxError::Fatal(anyhow!("empty argv")));
        }
        let env = scripts::env_script(&process.env).ok_or_else(|| {
            SandboxError::Fatal(anyhow!("an environment variable name is not valid"))
        })?;
        let task = self.task_id(&handle.id).await?;
        let mut args = vec![dir];
        args.extend(process.argv.iter().cloned());
        let command = Command {
            argv: scripts::sh(scripts::LAUNCH, args),
            workdir: Some(process.cwd.clone()),
        };
        let failed = |s| status_error("starting the process", s);
        let exec_id = exec::start(&self.client, &task, &command)
            .await
            .map_err(failed)?;
        exec::send_stdin(&self.client, &exec_id, env.as_bytes())
            .await
            .map_err(failed)?;
        let (output, ended) = exec::read_output(&self.client, &exec_id, HELPER_OUTPUT, |out| {
            out.ends_with(b"started\n")
        })
        .await
        .map_err(failed)?;
        if !ended {
            return Ok(ProcessRef {
                id: process.name.clone(),
            });
        }
        let code = exec::wait(&self.client, &exec_id).await.map_err(failed)?;
        let said = String::from_utf8_lossy(&output);
        if said.contains("started\n") {
            // It started and already ended: its exit file tells the rest.
            return Ok(ProcessRef {
                id: process.name.clone(),
            });
        }
        if code == scripts::LAUNCH_EXISTS {
            return Err(SandboxError::Fatal(anyhow!(
                "a process named {} exists already",
                process.name
            )));
        }
        Err(SandboxError::Fatal(anyhow!(
            "starting {} failed ({code}): {}",
            process.name,
            said.trim()
        )))
    }

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        let dir = process_dir(handle, &process.id)?;
        let finished = self
            .run(
                handle,
                scripts::sh(scripts::STATUS, [dir]),
                None,
                None,
                HELPER_OUTPUT,
            )
            .await?;
        let said = String::from_utf8_lossy(&finished.output);
        match scripts::parse_status(&said) {
            Some(Reported::Exited(code)) => Ok(ProcessStatus::Exited(code)),
            Some(Reported::Running) => Ok(ProcessStatus::Running),
            Some(Reported::Lost) => Ok(ProcessStatus::Lost),
            Some(Reported::Unknown) => Err(SandboxError::Gone(format!("process {}", process.id))),
            None => Err(SandboxError::Transient(anyhow!(
                "process status unreadable: {}",
                said.trim()
            ))),
        }
    }

    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()> {
        let dir = process_dir(handle, &process.id)?;
        let tenths = (grace.as_millis() / 100).to_string();
        match self
            .run(
                handle,
                scripts::sh(scripts::KILL, [dir, tenths]),
                None,
                None,
                HELPER_OUTPUT,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_gone() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        let dir = process_dir(handle, &process.id)?;
        let max = max.clamp(1, 4 * 1024 * 1024);
        let argv = scripts::sh(scripts::READ, [dir, offset.to_string(), max.to_string()]);
        let finished = self.run(handle, argv, None, None, max).await?;
        match finished.exit_code {
            0 => {
                let next_offset = offset + finished.output.len() as u64;
                Ok(OutputChunk {
                    data: finished.output,
                    next_offset,
                })
            }
            scripts::READ_UNKNOWN => Err(SandboxError::Gone(format!("process {}", process.id))),
            code => Err(SandboxError::Transient(anyhow!(
                "reading output failed ({code})"
            ))),
        }
    }

    async fn snapshot(&self, handle: &Handle) -> Result<SnapshotRef> {
        let request = wire::SandboxSnapshotFsRequest {
            sandbox_id: handle.id.clone(),
            timeout: SNAPSHOT_WAIT_SECS,
        };
        let response = self
            .client
            .retrying_creation("SandboxSnapshotFs", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_snapshot_fs(request).await }
            })
            .await
            .map_err(|s| status_error("snapshotting the sandbox", s))?;
        let result = response.result.unwrap_or_default();
        if result.status() != wire::generic_result::GenericStatus::Success
            || response.image_id.is_empty()
        {
            return Err(SandboxError::Transient(anyhow!(
                "the filesystem snapshot did not succeed ({:?}): {}",
                result.status(),
                result.exception
            )));
        }
        Ok(SnapshotRef {
            backend: self.kind().to_owned(),
            id: response.image_id,
            size_bytes: 0,
            created_at_ms: chrono::Utc::now().timestamp_millis(),
            base_image: handle.image.clone(),
        })
    }

    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        let request = wire::ImageFromIdRequest {
            image_id: snapshot.id.clone(),
        };
        match self
            .client
            .retrying("ImageFromId", |mut rpc| {
                let request = request.clone();
                async move { rpc.image_from_id(request).await }
            })
            .await
        {
            Ok(_) => Ok(true),
            Err(s) if s.code() == Code::NotFound => Ok(false),
            Err(s) => Err(status_error("looking up the snapshot", s)),
        }
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<()> {
        let request = wire::ImageDeleteRequest {
            image_id: snapshot.id.clone(),
        };
        match self
            .client
            .retrying("ImageDelete", |mut rpc| {
                let request = request.clone();
                async move { rpc.image_delete(request).await }
            })
            .await
        {
            Ok(()) => Ok(()),
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(status_error("deleting the snapshot", s)),
        }
    }

    async fn destroy(&self, handle: &Handle) -> Result<()> {
        self.terminate(&handle.id).await?;
        // Termination is asynchronous on Modal's side: wait for the result,
        // so that nothing of the sandbox runs once destroy has returned.
        for _ in 0..TERMINATE_WAITS {
            let request = wire::SandboxWaitRequest {
                sandbox_id: handle.id.clone(),
                timeout: TERMINATE_WAIT_SECS,
            };
            match self
                .client
                .retrying("SandboxWait", |mut rpc| {
                    let request = request.clone();
                    async move { rpc.sandbox_wait(request).await }
                })
                .await
            {
                Ok(response) if response.result.is_some() => return Ok(()),
                Ok(_) => {}
                Err(s) if s.code() == Code::NotFound => return Ok(()),
                Err(s) => return Err(status_error("waiting for the sandbox to stop", s)),
            }
        }
        Err(SandboxError::Transient(anyhow!(
            "sandbox {} was terminated but has not stopped yet",
            handle.id
        )))
    }

    /// The policy is applied when a sandbox is created (and so again on
    /// resume); changing it on a running sandbox needs Modal's per-task
    /// command router, which this backend does not use.
    async fn update_network_policy(
        &self,
        _handle: &Handle,
        _policy: &common::NetworkPolicy,
    ) -> Result<()> {
        Err(SandboxError::Unsupported(
            "changing the network policy of a running Modal sandbox",
        ))
    }

    async fn list(&self) -> Result<Vec<Handle>> {
        // Without an outpost, every app of the environment ("" = all).
        let (app_id, tag_filter) = match &self.settings.outpost_id {
            Some(outpost) => (
                self.app_id(&app_name_for(outpost)).await?,
                vec![wire::SandboxTag {
                    tag_name: sandbox::LABEL_OUTPOST_ID.to_owned(),
                    tag_value: outpost.clone(),
                }],
            ),
            None => (String::new(), Vec::new()),
        };
        let mut handles = Vec::new();
        let mut before = 0.0;
        loop {
            let request = wire::SandboxListRequest {
                app_id: app_id.clone(),
                before_timestamp: before,
                environment_name: String::new(),
                include_finished: false,
                tags: tag_filter.clone(),
            };
            let page = self
                .client
                .retrying("SandboxList", |mut rpc| {
                    let request = request.clone();
                    async move { rpc.sandbox_list(request).await }
                })
                .await
                .map_err(|s| status_error("listing sandboxes", s))?
                .sandboxes;
            let Some(oldest) = page.iter().map(|s| s.created_at).reduce(f64::min) else {
                break;
            };
            // Only sandboxes Garrison made (they carry a session label).
            for info in page {
                if !info
                    .tags
                    .iter()
                    .any(|t| t.tag_name == sandbox::LABEL_SESSION_ID)
                {
                    continue;
                }
                let mut labels: BTreeMap<String, String> = info
                    .tags
                    .into_iter()
                    .map(|t| (t.tag_name, t.tag_value))
                    .collect();
                let root = labels
                    .remove(TAG_ROOT)
                    .unwrap_or_else(|| format!("/{}", scripts::ROOT_DIR));
                let image = (!info.image_id.is_empty()).then_some(info.image_id);
                handles.push(handle_for(info.id, info.name, image, &root, labels));
            }
            if before != 0.0 && oldest >= before {
                break;
            }
            before = oldest;
        }
        handles.sort_by(|a, b| a.id.cmp(&b.id));
        handles.dedup_by(|a, b| a.id == b.id);
        Ok(handles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_access_follows_the_mapping() {
        use wire::network_access::NetworkAccessType;
        let open = network_access(&crate::policy::Controls::default());
        assert_eq!(open.network_access_type, NetworkAccessType::Open as i32);
        let blocked = network_access(&crate::policy::Controls {
            block_network: true,
            ..Default::default()
        });
        assert_eq!(
            blocked.network_access_type,
            NetworkAccessType::Blocked as i32
        );
        let listed = network_access(&crate::policy::Controls {
            cidr_allowlist: Some(vec!["203.0.113.5/32".into()]),
            ..Default::default()
        });
        assert_eq!(
            listed.network_access_type,
            NetworkAccessType::Allowlist as i32
        );
        assert_eq!(listed.allowed_cidrs, ["203.0.113.5/32"]);
    }

    #[test]
    fn a_root_from_a_tag_must_be_a_plain_absolute_path() {
        let with_root = |root: &str| {
            handle_for(
                "sb-1".into(),
                "garrison-x".into(),
                None,
                root,
                Default::default(),
            )
        };
        assert_eq!(root_of(&with_root("/garrison")).unwrap(), "/garrison");
        for bad in ["/", "garrison", "/a/../etc", "/a//b", "/./a"] {
            assert!(root_of(&with_root(bad)).is_err(), "{bad}");
        }
    }
}
