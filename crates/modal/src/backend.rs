//! [`ModalBackend`]: one Modal Sandbox per Garrison sandbox.
//!
//! Sandboxes of an outpost live in one Modal app (`garrison-<outpost>` by
//! default), carry the labels as Modal sandbox tags (so [`Sandbox::list`]
//! finds what a crash left behind) and the sandbox name as their Modal name
//! (so a second sandbox of the same name is refused by Modal itself).
//! Processes are run through `ContainerExec` as described in
//! [`crate::scripts`]; a snapshot is a Modal filesystem snapshot, i.e. an
//! image id a later sandbox starts from.
//!
//! The code is cut by concern: `lifecycle` (app, image, create or restore,
//! terminate), `processes` (the sandbox's task and `ContainerExec`),
//! `files`, `snapshots`, `listing` (tags, and finding sandboxes by them)
//! and `network` (network access). This file holds the settings, the
//! handle layout and the error mapping they share.

mod files;
mod lifecycle;
mod listing;
mod memory;
mod network;
mod processes;
mod sleeping;
mod snapshots;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::anyhow;
use async_trait::async_trait;
use sandbox::{
    Capabilities, Handle, OutputChunk, ProcessRef, ProcessSpec, ProcessStatus, Result, Sandbox,
    SandboxError, SandboxSpec, SnapshotRef,
};
use tonic::{Code, Status};

use crate::client::{Client, ClientConfig};
use crate::wire;

/// Modal's longest sandbox lifetime.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

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
    /// --backend modal`; `None` is the name `default`
    /// (`DEFAULT_IMAGE`).
    pub image: Option<String>,
    /// Where image names are looked up (see [`crate::image::ImageCache`]).
    pub image_cache: Option<PathBuf>,
    /// Where sessions sleeping in a memory snapshot are recorded (a
    /// directory under Garrison's state directory). Set, suspend keeps a
    /// session's memory and processes; `None` turns memory snapshots off.
    pub memory_records: Option<PathBuf>,
    /// Where Modal may place sandboxes; empty lets Modal choose.
    pub regions: Vec<String>,
    /// A sandbox's maximum lifetime (Modal terminates it then).
    pub timeout: Duration,
    /// Modal ends a sandbox idle this long (no exec, no stdin, no
    /// connection); `None` leaves only [`ModalSettings::timeout`].
    pub idle_timeout: Option<Duration>,
    /// The isolation sandboxes run under (`Sandbox.create(runtime=...)`);
    /// `None` is Modal's default.
    pub runtime: Option<Runtime>,
    /// The Modal environment apps and sandboxes are in; `None` is the
    /// account's default.
    pub environment: Option<String>,
}

/// What isolates a Modal sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// gVisor, Modal's default.
    Gvisor,
    /// A micro-VM.
    Vm,
}

impl Runtime {
    /// The value `Sandbox.runtime` carries.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Gvisor => "gvisor",
            Runtime::Vm => "vm",
        }
    }

    /// Parses `gvisor` or `vm`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "gvisor" => Some(Runtime::Gvisor),
            "vm" => Some(Runtime::Vm),
            _ => None,
        }
    }
}

/// The image name used when none is configured, as for the local backend.
pub(crate) const DEFAULT_IMAGE: &str = "default";

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
}

#[async_trait]
impl Sandbox for ModalBackend {
    fn kind(&self) -> &'static str {
        "modal"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            os: sandbox::Os::Linux,
            // Modal Sandboxes run on x86_64 (no setting chooses otherwise).
            arch: sandbox::Arch::X86_64,
            // Memory snapshots, where they are recorded (`backend::memory`).
            suspend_keeps_memory: self.settings.memory_records.is_some(),
            enforces_network_policy: true,
            snapshots: true,
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Handle> {
        lifecycle::create(self, spec).await
    }

    async fn put_file(&self, handle: &Handle, path: &str, bytes: &[u8], mode: u32) -> Result<()> {
        files::put_file(self, handle, path, bytes, mode).await
    }

    async fn spawn(&self, handle: &Handle, process: &ProcessSpec) -> Result<ProcessRef> {
        processes::spawn(self, handle, process).await
    }

    async fn status(&self, handle: &Handle, process: &ProcessRef) -> Result<ProcessStatus> {
        processes::status(self, handle, process).await
    }

    async fn kill(&self, handle: &Handle, process: &ProcessRef, grace: Duration) -> Result<()> {
        processes::kill(self, handle, process, grace).await
    }

    async fn read_output(
        &self,
        handle: &Handle,
        process: &ProcessRef,
        offset: u64,
        max: usize,
    ) -> Result<OutputChunk> {
        processes::read_output(self, handle, process, offset, max).await
    }

    async fn snapshot(&self, handle: &Handle) -> Result<SnapshotRef> {
        snapshots::snapshot(self, handle).await
    }

    async fn snapshot_exists(&self, snapshot: &SnapshotRef) -> Result<bool> {
        snapshots::snapshot_exists(self, snapshot).await
    }

    async fn delete_snapshot(&self, snapshot: &SnapshotRef) -> Result<()> {
        snapshots::delete_snapshot(self, snapshot).await
    }

    async fn destroy(&self, handle: &Handle) -> Result<()> {
        lifecycle::destroy(self, handle).await
    }

    /// Changes the running sandbox's network access through its command
    /// router (`TaskSetNetworkAccess`); the gateway stays allowed.
    async fn update_network_policy(
        &self,
        handle: &Handle,
        policy: &common::NetworkPolicy,
    ) -> Result<()> {
        network::update_network_policy(self, handle, policy).await
    }

    /// Sessions sleeping in a memory snapshot are listed too.
    async fn list(&self) -> Result<Vec<Handle>> {
        listing::list(self).await
    }

    /// A memory snapshot, then the sandbox ends (see `backend::memory`).
    async fn suspend(&self, handle: &Handle) -> Result<()> {
        memory::suspend(self, handle).await
    }

    /// The memory snapshot restored into a new sandbox of the same name.
    async fn resume(&self, handle: &Handle) -> Result<()> {
        memory::resume(self, handle).await
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

#[cfg(test)]
mod tests {
    use super::*;

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
