//! The mock's bookkeeping: apps, sandboxes, execs, images, the clock and
//! injected faults.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use modal::wire;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tonic::{Code, Status};

use crate::MockConfig;
use crate::exec::{self, Exec};

/// A built image every mock has: sandboxes from it start empty.
pub const BASE_IMAGE_ID: &str = "im-mockbase";

/// What a test may look at of a sandbox.
#[derive(Clone, Debug)]
pub struct SandboxView {
    /// `sb-...`.
    pub id: String,
    /// The app it was created in.
    pub app_id: String,
    /// Its Modal name, unique among the app's running sandboxes.
    pub name: Option<String>,
    /// Its tags, as last set.
    pub tags: Vec<(String, String)>,
    /// The definition it was created with.
    pub definition: wire::Sandbox,
    /// Its filesystem on the host (removed when it ends).
    pub dir: PathBuf,
    /// Not yet terminated, timed out or ended.
    pub running: bool,
}

/// What a test may look at of an image.
#[derive(Clone, Debug)]
pub struct ImageView {
    /// `im-...`.
    pub id: String,
    /// The Dockerfile commands of a build.
    pub dockerfile_commands: Vec<String>,
    /// The image ids it was built on.
    pub base_images: Vec<String>,
    /// The image builder version a build asked for.
    pub builder_version: String,
    /// For a filesystem snapshot, the sandbox it was taken of.
    pub snapshot_of: Option<String>,
}

pub struct MockSandbox {
    pub view: SandboxView,
    pub created_at: f64,
    pub task_id: String,
    pub result: Option<wire::GenericResult>,
    pub pids: Vec<u32>,
}

pub struct MockImage {
    pub view: ImageView,
    /// Mock-clock time of creation.
    pub created: Duration,
    /// The filesystem of a snapshot image.
    pub files: Option<PathBuf>,
}

#[derive(Default)]
pub struct Inner {
    pub apps: HashMap<String, String>,
    pub sandboxes: Vec<MockSandbox>,
    pub execs: HashMap<String, Arc<Exec>>,
    pub images: HashMap<String, MockImage>,
}

pub struct State {
    pub config: MockConfig,
    pub inner: Mutex<Inner>,
    started: Instant,
    offset: Mutex<Duration>,
    faults: Mutex<HashMap<String, VecDeque<Code>>>,
    calls: Mutex<HashMap<String, u32>>,
}

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", rand::random::<u64>())
}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

impl State {
    pub fn new(config: MockConfig) -> Self {
        let mut inner = Inner::default();
        inner.images.insert(
            BASE_IMAGE_ID.to_owned(),
            MockImage {
                view: ImageView {
                    id: BASE_IMAGE_ID.to_owned(),
                    dockerfile_commands: vec!["FROM debian:bookworm-slim".to_owned()],
                    base_images: Vec::new(),
                    builder_version: String::new(),
                    snapshot_of: None,
                },
                created: Duration::ZERO,
                files: None,
            },
        );
        Self {
            config,
            inner: Mutex::new(inner),
            started: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
            faults: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
        }
    }

    pub fn now(&self) -> Duration {
        self.started.elapsed() + *self.offset.lock().unwrap()
    }

    pub fn advance_clock(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }

    pub fn fail_next(&self, rpc: &str, code: Code, times: u32) {
        let mut faults = self.faults.lock().unwrap();
        let queue = faults.entry(rpc.to_owned()).or_default();
        queue.extend(std::iter::repeat_n(code, times as usize));
    }

    /// Counts the call and fails it if a fault is queued for it.
    pub fn enter(&self, rpc: &str) -> Result<(), Status> {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(rpc.to_owned())
            .or_default() += 1;
        match self
            .faults
            .lock()
            .unwrap()
            .get_mut(rpc)
            .and_then(VecDeque::pop_front)
        {
            Some(code) => Err(Status::new(code, format!("injected fault in {rpc}"))),
            None => Ok(()),
        }
    }

    pub fn calls(&self, rpc: &str) -> u32 {
        self.calls.lock().unwrap().get(rpc).copied().unwrap_or(0)
    }

    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.config.root.join("sandboxes").join(id)
    }

    pub fn image_dir(&self, id: &str) -> PathBuf {
        self.config.root.join("images").join(id)
    }

    /// Whether an image exists and, for a snapshot, has not expired.
    pub fn image_alive(&self, image: &MockImage) -> bool {
        match (image.files.is_some(), self.config.snapshot_ttl) {
            (true, Some(ttl)) => self.now().saturating_sub(image.created) < ttl,
            _ => true,
        }
    }

    pub fn sandbox_view(&self, id: &str) -> Option<SandboxView> {
        let inner = self.inner.lock().unwrap();
        inner
            .sandboxes
            .iter()
            .find(|s| s.view.id == id)
            .map(|s| s.view.clone())
    }

    pub fn sandbox_views(&self) -> Vec<SandboxView> {
        let inner = self.inner.lock().unwrap();
        inner.sandboxes.iter().map(|s| s.view.clone()).collect()
    }

    pub fn image_view(&self, id: &str) -> Option<ImageView> {
        self.inner
            .lock()
            .unwrap()
            .images
            .get(id)
            .map(|i| i.view.clone())
    }

    pub fn built_images(&self) -> Vec<ImageView> {
        let inner = self.inner.lock().unwrap();
        let mut views: Vec<ImageView> = inner
            .images
            .values()
            .filter(|i| i.files.is_none() && i.view.id != BASE_IMAGE_ID)
            .map(|i| i.view.clone())
            .collect();
        views.sort_by(|a, b| a.id.cmp(&b.id));
        views
    }

    /// Ends a sandbox: records `result` (unless it ended already) and kills
    /// every process it started.
    pub fn finish(
        &self,
        sandbox_id: &str,
        result: wire::GenericResult,
    ) -> Option<wire::GenericResult> {
        let (roots, previous) = {
            let mut inner = self.inner.lock().unwrap();
            let exec_pids: Vec<u32> = inner
                .execs
                .values()
                .filter(|e| e.sandbox_id == sandbox_id)
                .filter_map(|e| e.pid)
                .collect();
            let sandbox = inner
                .sandboxes
                .iter_mut()
                .find(|s| s.view.id == sandbox_id)?;
            let previous = sandbox.result.clone();
            if previous.is_none() {
                sandbox.result = Some(result);
                sandbox.view.running = false;
            }
            let mut roots = std::mem::take(&mut sandbox.pids);
            roots.extend(exec_pids);
            (roots, previous)
        };
        kill_all(&roots);
        // A finished sandbox's filesystem is gone (a snapshot keeps a copy).
        let _ = std::fs::remove_dir_all(self.sandbox_dir(sandbox_id));
        previous
    }

    pub fn terminate_all(&self) {
        let ids: Vec<String> = self
            .inner
            .lock()
            .unwrap()
            .sandboxes
            .iter()
            .filter(|s| s.result.is_none())
            .map(|s| s.view.id.clone())
            .collect();
        for id in ids {
            self.finish(&id, terminated());
        }
    }
}

pub fn terminated() -> wire::GenericResult {
    wire::GenericResult {
        status: wire::generic_result::GenericStatus::Terminated as i32,
        exception: String::new(),
        exitcode: 0,
    }
}

/// SIGKILL to `roots` and everything below them.
fn kill_all(roots: &[u32]) {
    // Stop the tree from growing first, then kill it.
    let all = exec::descendants(roots);
    for pid in &all {
        let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGSTOP);
    }
    for pid in exec::descendants(roots) {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    for pid in all {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
}

/// Copies a directory tree, keeping modes, links and times (`cp -a`).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .env_clear()
        .env("PATH", exec::PATH)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("cp -a failed: {status}")))
    }
}
