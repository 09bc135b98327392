//! The mock's bookkeeping: apps, sandboxes, execs, images, the clock and
//! injected faults.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modal::wire;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tonic::{Code, Status};

use crate::MockConfig;
use crate::exec::{self, Exec};
use crate::ids::unix_now;

/// A built image every mock has: sandboxes from it start empty.
pub(crate) const BASE_IMAGE_ID: &str = "im-mockbase";

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
    /// The memory snapshot it was restored from.
    pub restored_from: Option<String>,
    /// How often its network access was changed while it ran.
    pub network_changes: u32,
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

pub(crate) struct MockSandbox {
    pub view: SandboxView,
    pub created_at: f64,
    pub task_id: String,
    pub result: Option<wire::GenericResult>,
    pub pids: Vec<u32>,
    /// The entry point, whose end ends the sandbox.
    pub entry: Option<Arc<Exec>>,
    /// The sandbox's environment (inline secrets), which its execs inherit.
    pub env: Vec<(String, String)>,
}

/// A memory snapshot. A host cannot copy a process tree, so taking one
/// moves the sandbox's processes (stopped) and filesystem into it: the
/// sandbox ends, and one restore gets them back, running again.
pub(crate) struct MemorySnapshot {
    pub source: SandboxView,
    /// The stopped process trees, `None` once restored.
    pub frozen: Option<Frozen>,
}

pub(crate) struct Frozen {
    pub dir: PathBuf,
    pub pids: Vec<u32>,
    pub entry: Option<Arc<Exec>>,
    pub env: Vec<(String, String)>,
}

pub(crate) struct MockImage {
    pub view: ImageView,
    /// Mock-clock time of creation.
    pub created: Duration,
    /// How long it is kept (a filesystem snapshot's `ttl_seconds`).
    pub ttl: Option<Duration>,
    /// The filesystem of a snapshot image.
    pub files: Option<PathBuf>,
}

#[derive(Default)]
pub(crate) struct Inner {
    pub apps: HashMap<String, String>,
    pub sandboxes: Vec<MockSandbox>,
    pub execs: HashMap<String, Arc<Exec>>,
    pub images: HashMap<String, MockImage>,
    pub memory_snapshots: HashMap<String, MemorySnapshot>,
    /// Client-chosen ids (filesystem snapshot ids, memory snapshot
    /// idempotency keys, `x-idempotency-key`s) to what they made, so a
    /// retried request answers what the first one made.
    pub made: HashMap<String, String>,
}

pub(crate) struct State {
    pub config: MockConfig,
    /// `http://127.0.0.1:PORT`, set once the server listens: the command
    /// router is served at the same address.
    pub url: std::sync::OnceLock<String>,
    /// Signs the command router tokens this mock hands out.
    router_key: String,
    pub inner: Mutex<Inner>,
    pub secrets: crate::secrets::Secrets,
    started: Instant,
    offset: Mutex<Duration>,
    faults: Mutex<HashMap<String, VecDeque<Code>>>,
    /// Calls whose answer is lost after they did their work.
    lost_answers: Mutex<HashMap<String, u32>>,
    /// The `x-retry-attempt` of each call of an RPC that records it.
    retry_attempts: Mutex<HashMap<String, Vec<Option<u32>>>>,
    calls: Mutex<HashMap<String, u32>>,
}

impl State {
    pub(crate) fn new(config: MockConfig) -> Self {
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
                ttl: None,
                files: None,
            },
        );
        Self {
            config,
            url: std::sync::OnceLock::new(),
            router_key: format!("{:032x}", rand::random::<u128>()),
            inner: Mutex::new(inner),
            secrets: Default::default(),
            started: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
            faults: Mutex::new(HashMap::new()),
            lost_answers: Mutex::new(HashMap::new()),
            retry_attempts: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
        }
    }

    /// A command router token for `task_id`: JWT-shaped (Modal's client
    /// reads its `exp` to refresh it in time), its last part this mock's
    /// key, so only tokens the mock handed out are accepted.
    pub(crate) fn router_token(&self, task_id: &str) -> String {
        use base64::Engine as _;
        let b64 = |v: &serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let exp = unix_now() as u64 + 3600;
        format!(
            "{}.{}.{}",
            b64(&serde_json::json!({ "alg": "none", "typ": "JWT" })),
            b64(&serde_json::json!({ "exp": exp, "task_id": task_id })),
            self.router_key
        )
    }

    /// Whether `token` is one [`State::router_token`] made.
    pub(crate) fn router_token_valid(&self, token: &str) -> bool {
        token
            .rsplit_once('.')
            .is_some_and(|(_, key)| key == self.router_key)
    }

    /// The command router's URL (the mock's own).
    pub(crate) fn router_url(&self) -> String {
        self.url.get().cloned().unwrap_or_default()
    }

    pub(crate) fn now(&self) -> Duration {
        self.started.elapsed() + *self.offset.lock().unwrap()
    }

    pub(crate) fn advance_clock(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }

    pub(crate) fn fail_next(&self, rpc: &str, code: Code, times: u32) {
        let mut faults = self.faults.lock().unwrap();
        let queue = faults.entry(rpc.to_owned()).or_default();
        queue.extend(std::iter::repeat_n(code, times as usize));
    }

    /// Counts the call and fails it if a fault is queued for it.
    pub(crate) fn enter(&self, rpc: &str) -> Result<(), Status> {
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

    pub(crate) fn lose_next_answers(&self, rpc: &str, times: u32) {
        *self
            .lost_answers
            .lock()
            .unwrap()
            .entry(rpc.to_owned())
            .or_default() += times;
    }

    /// Called once `rpc` did its work: fails it with UNAVAILABLE, as a
    /// connection lost before the answer arrived, if a loss is queued.
    pub(crate) fn lose_answer(&self, rpc: &str) -> Result<(), Status> {
        let mut lost = self.lost_answers.lock().unwrap();
        match lost.get_mut(rpc) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Err(Status::unavailable(format!(
                    "injected: the answer of {rpc} was lost"
                )))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn note_retry_attempt(&self, rpc: &str, attempt: Option<u32>) {
        self.retry_attempts
            .lock()
            .unwrap()
            .entry(rpc.to_owned())
            .or_default()
            .push(attempt);
    }

    pub(crate) fn retry_attempts(&self, rpc: &str) -> Vec<Option<u32>> {
        self.retry_attempts
            .lock()
            .unwrap()
            .get(rpc)
            .cloned()
            .unwrap_or_default()
    }

    /// What a client-chosen key made, if a request with it succeeded.
    pub(crate) fn made(&self, key: &str) -> Option<String> {
        self.inner.lock().unwrap().made.get(key).cloned()
    }

    pub(crate) fn record_made(&self, key: String, id: String) {
        self.inner.lock().unwrap().made.insert(key, id);
    }

    pub(crate) fn calls(&self, rpc: &str) -> u32 {
        self.calls.lock().unwrap().get(rpc).copied().unwrap_or(0)
    }

    pub(crate) fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.config.root.join("sandboxes").join(id)
    }

    pub(crate) fn image_dir(&self, id: &str) -> PathBuf {
        self.config.root.join("images").join(id)
    }

    /// Whether an image exists and, for a snapshot, has not expired
    /// (its own TTL, or the mock's for every snapshot).
    pub(crate) fn image_alive(&self, image: &MockImage) -> bool {
        let ttl = match (
            image.ttl,
            image
                .files
                .is_some()
                .then_some(())
                .and(self.config.snapshot_ttl),
        ) {
            (Some(own), Some(mock)) => Some(own.min(mock)),
            (own, mock) => own.or(mock),
        };
        ttl.is_none_or(|ttl| self.now().saturating_sub(image.created) < ttl)
    }

    pub(crate) fn sandbox_view(&self, id: &str) -> Option<SandboxView> {
        let inner = self.inner.lock().unwrap();
        inner
            .sandboxes
            .iter()
            .find(|s| s.view.id == id)
            .map(|s| s.view.clone())
    }

    pub(crate) fn sandbox_views(&self) -> Vec<SandboxView> {
        let inner = self.inner.lock().unwrap();
        inner.sandboxes.iter().map(|s| s.view.clone()).collect()
    }

    pub(crate) fn image_view(&self, id: &str) -> Option<ImageView> {
        self.inner
            .lock()
            .unwrap()
            .images
            .get(id)
            .map(|i| i.view.clone())
    }

    pub(crate) fn built_images(&self) -> Vec<ImageView> {
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
    pub(crate) fn finish(
        &self,
        sandbox_id: &str,
        result: wire::GenericResult,
    ) -> Option<wire::GenericResult> {
        let (roots, previous, dir) = {
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
            (roots, previous, sandbox.view.dir.clone())
        };
        // An ended sandbox has nothing left: its processes are dead, or
        // moved with its directory into a memory snapshot (and maybe back,
        // restored under the same path, where they must not be touched).
        if previous.is_none() {
            // Whatever escaped the exec's process group is found too.
            let mut roots = roots;
            roots.extend(exec::members(sandbox_id, &dir));
            kill_all(&roots);
            // A finished sandbox's filesystem is gone (a snapshot keeps a copy).
            let _ = std::fs::remove_dir_all(&dir);
        }
        previous
    }

    pub(crate) fn terminate_all(&self) {
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
        let frozen: Vec<u32> = self
            .inner
            .lock()
            .unwrap()
            .memory_snapshots
            .values_mut()
            .filter_map(|m| m.frozen.take())
            .flat_map(|f| f.pids)
            .collect();
        kill_all(&frozen);
    }
}

pub(crate) fn terminated() -> wire::GenericResult {
    wire::GenericResult {
        status: wire::generic_result::GenericStatus::Terminated as i32,
        exception: String::new(),
        exitcode: 0,
    }
}

/// SIGKILL to `roots`, everything below them and their process groups
/// (each exec leads its own group, and a process it put in the background
/// stays in it after its parent exits and it is re-parented away).
fn kill_all(roots: &[u32]) {
    signal_groups(roots, Signal::SIGSTOP);
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
    signal_groups(roots, Signal::SIGKILL);
}

/// `signal` to the process groups `roots` lead, and everything below them.
pub(crate) fn signal_tree(roots: &[u32], signal: Signal) {
    signal_groups(roots, signal);
    for pid in exec::descendants(roots) {
        let _ = kill(Pid::from_raw(pid as i32), signal);
    }
}

fn signal_groups(leaders: &[u32], signal: Signal) {
    for pid in leaders {
        if let Ok(pid) = i32::try_from(*pid)
            && pid > 1
        {
            let _ = nix::sys::signal::killpg(Pid::from_raw(pid), signal);
        }
    }
}

/// Copies a directory tree, keeping modes, links and times (`cp -a`).
pub(crate) fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
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
