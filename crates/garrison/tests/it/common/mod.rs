//! Shared harness for end-to-end tests: the emulator in-process, the real
//! `garrison` binary as a child process, polling helpers with generous
//! timeouts that only stop a hung test.

#![allow(dead_code)]

pub(crate) mod hosts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use emulator::{Emulator, EmulatorConfig, NewSession, Script, SessionView, Step, Then};
use fleet::{Platform, SessionStatus};

/// Bounds every wait; a healthy run takes a small fraction of it.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(120);

/// A checked session id, for the state store's queries.
pub(crate) fn sid(id: &str) -> fleet::SessionId {
    fleet::SessionId::new(id).unwrap()
}

pub(crate) fn garrison_bin() -> &'static str {
    env!("CARGO_BIN_EXE_garrison")
}

/// An emulator with short lags so tests move quickly.
pub(crate) async fn emulator() -> Emulator {
    emulator_with(|_| {}).await
}

pub(crate) async fn emulator_with(tweak: impl FnOnce(&mut EmulatorConfig)) -> Emulator {
    let mut config = EmulatorConfig {
        status_lag: Duration::from_millis(200),
        linger: Duration::from_secs(2),
        ..Default::default()
    };
    tweak(&mut config);
    Emulator::start(config).await.expect("emulator starts")
}

/// A running `garrison serve`, killed on drop.
pub(crate) struct Garrison {
    pub child: Child,
    pub state_dir: PathBuf,
    pub log_path: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// Runs before `garrison` (e.g. `ip netns exec NAME`), restarts included.
    prefix: Vec<String>,
    /// The mock Tensorlake this Garrison uses, kept alive while it runs.
    pub tensorlake: Option<Arc<TensorlakeWorld>>,
    /// The mock Modal API a `modal` Garrison talks to; lives as long as the
    /// Garrison (restarts included).
    pub modal: Option<std::sync::Arc<modal_mock::MockModal>>,
}

/// The API key the mock Tensorlake accepts.
pub(crate) const TENSORLAKE_KEY: &str = "tl_e2e_key_never_in_a_sandbox_8c1d";

/// A mock Tensorlake on its own runtime (so it outlives a Garrison killed
/// and restarted, and is shared by every Garrison of one test directory).
/// Dropping the last handle kills the processes it ran.
pub(crate) struct TensorlakeWorld {
    mock: Option<tensorlake_mock::MockTensorlake>,
    runtime: Option<tokio::runtime::Runtime>,
    pub root: PathBuf,
}

impl TensorlakeWorld {
    /// The mock for the test directory holding `state_dir`.
    pub(crate) fn for_state_dir(state_dir: &Path) -> Arc<TensorlakeWorld> {
        static WORLDS: Mutex<BTreeMap<PathBuf, Weak<TensorlakeWorld>>> =
            Mutex::new(BTreeMap::new());
        let dir = state_dir.parent().expect("state dir parent").to_owned();
        let mut worlds = WORLDS.lock().unwrap();
        if let Some(world) = worlds.get(&dir).and_then(Weak::upgrade) {
            return world;
        }
        let root = dir.join("tensorlake-mock");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let config = tensorlake_mock::MockConfig::new(TENSORLAKE_KEY, &root);
        let mock = std::thread::scope(|s| {
            s.spawn(|| runtime.block_on(tensorlake_mock::MockTensorlake::start(config)))
                .join()
                .unwrap()
        })
        .expect("mock Tensorlake starts");
        let world = Arc::new(TensorlakeWorld {
            mock: Some(mock),
            runtime: Some(runtime),
            root,
        });
        worlds.insert(dir, Arc::downgrade(&world));
        world
    }

    pub(crate) fn mock(&self) -> &tensorlake_mock::MockTensorlake {
        self.mock.as_ref().expect("mock")
    }

    /// What `garrison serve` needs to use it: the variables `garrison mock
    /// tensorlake` prints.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let mock = self.mock();
        vec![
            ("TENSORLAKE_API_URL".into(), mock.url().to_owned()),
            ("TENSORLAKE_SANDBOX_API_URL".into(), mock.url().to_owned()),
            ("TENSORLAKE_API_KEY".into(), TENSORLAKE_KEY.into()),
            (
                "TENSORLAKE_SANDBOX_ROOT".into(),
                mock.sandbox_root_template(),
            ),
        ]
    }

    /// The sandboxes' directories on the host.
    pub(crate) fn sandbox_dirs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.root.join("sandboxes"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    }
}

impl Drop for TensorlakeWorld {
    fn drop(&mut self) {
        // Kills every process the mock ran.
        drop(self.mock.take());
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

pub(crate) struct GarrisonOptions<'a> {
    pub outpost: &'a str,
    pub state_dir: &'a Path,
    pub extra_args: Vec<String>,
}

/// Which sandbox backend a test runs Garrison with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    Host,
    Local,
    /// The local backend with `SANDBOX_RUNTIME=runsc` (gVisor).
    LocalRunsc,
    /// The mock Tensorlake ([`tensorlake_mock`]), one per test directory.
    Tensorlake,
    /// Modal's API served by `modal_mock`, in the test process.
    Modal,
}

/// The test images' directory, when the local backend runs here and it
/// holds `image`, built with `--recipe desktop` by scripts/test-images;
/// otherwise says why the test is skipped.
pub(crate) fn desktop_test_images(image: &str) -> Option<PathBuf> {
    if !Backend::Local.available() {
        return None;
    }
    let images = PathBuf::from(std::env::var_os("GARRISON_TEST_IMAGES").unwrap());
    if !images.join("names").join(image).exists() {
        eprintln!(
            "skipped: no {image:?} image in {} (scripts/test-images builds it as root: \
             garrison image build {image} --recipe desktop)",
            images.display()
        );
        return None;
    }
    Some(images)
}

impl Backend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Host => "host",
            Backend::Local | Backend::LocalRunsc => "local",
            Backend::Tensorlake => "tensorlake",
            Backend::Modal => "modal",
        }
    }

    /// Whether this machine can run the backend; prints why not. The local
    /// backend needs root and the test image `scripts/setup` builds
    /// (`GARRISON_TEST_IMAGES`, exported by `scripts/test`).
    pub(crate) fn available(self) -> bool {
        match self {
            Backend::Host | Backend::Tensorlake | Backend::Modal => true,
            Backend::Local | Backend::LocalRunsc => {
                if !nix_is_root() {
                    eprintln!("skipped: the local backend needs root");
                    return false;
                }
                if std::env::var_os("GARRISON_TEST_IMAGES").is_none() {
                    eprintln!(
                        "skipped: GARRISON_TEST_IMAGES is not set (scripts/test builds the test image)"
                    );
                    return false;
                }
                true
            }
        }
    }
}

pub(crate) fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Garrison {
    pub(crate) fn start(emu: &Emulator, opts: GarrisonOptions<'_>) -> Garrison {
        Self::start_on(emu, opts, Backend::Host)
    }

    /// `garrison serve` on `backend`. For `local`, the state directory's image
    /// store is the test image store.
    pub(crate) fn start_on(
        emu: &Emulator,
        opts: GarrisonOptions<'_>,
        backend: Backend,
    ) -> Garrison {
        Self::start_on_with_env(emu, opts, backend, Vec::new())
    }

    /// [`Garrison::start_on`] with `extra_env` added to the test environment.
    pub(crate) fn start_on_with_env(
        emu: &Emulator,
        opts: GarrisonOptions<'_>,
        backend: Backend,
        extra_env: Vec<(String, String)>,
    ) -> Garrison {
        Self::start_on_behind(emu, opts, backend, extra_env, Vec::new())
    }

    /// [`Garrison::start_on_with_env`] with `prefix` run in front of
    /// `garrison` (e.g. `ip netns exec HOST`), restarts included.
    pub(crate) fn start_on_behind(
        emu: &Emulator,
        opts: GarrisonOptions<'_>,
        backend: Backend,
        extra_env: Vec<(String, String)>,
        prefix: Vec<String>,
    ) -> Garrison {
        let mut extra_env = extra_env;
        if backend == Backend::LocalRunsc {
            extra_env.push(("SANDBOX_RUNTIME".into(), "runsc".into()));
        }
        if matches!(backend, Backend::Local | Backend::LocalRunsc) {
            std::fs::create_dir_all(opts.state_dir).unwrap();
            let images = PathBuf::from(
                std::env::var_os("GARRISON_TEST_IMAGES").expect("GARRISON_TEST_IMAGES"),
            );
            let link = opts.state_dir.join("images");
            if !link.exists() {
                std::os::unix::fs::symlink(images, link).unwrap();
            }
        }
        let tensorlake = (backend == Backend::Tensorlake).then(|| {
            let world = TensorlakeWorld::for_state_dir(opts.state_dir);
            extra_env.extend(world.env());
            world
        });
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--outpost".into(),
            opts.outpost.into(),
            "--api-url".into(),
            emu.base_url(),
            "--static-base-url".into(),
            emu.static_base_url(),
            "--state-dir".into(),
            opts.state_dir.display().to_string(),
            "--backend".into(),
            backend.name().into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ];
        args.extend(opts.extra_args);
        let modal = (backend == Backend::Modal).then(|| {
            let mock = start_modal_mock(opts.state_dir);
            extra_env.extend(modal_env(&mock));
            mock
        });
        let mut garrison = Self::spawn_behind(emu, opts.state_dir, args, extra_env, prefix);
        garrison.tensorlake = tensorlake;
        garrison.modal = modal;
        garrison
    }

    /// `garrison` with exactly these arguments (and the test environment).
    pub(crate) fn start_with_args(emu: &Emulator, state_dir: &Path, args: Vec<String>) -> Garrison {
        Self::start_with_args_and_env(emu, state_dir, args, Vec::new())
    }

    /// [`Garrison::start_with_args`] with `extra_env` added to the test
    /// environment.
    pub(crate) fn start_with_args_and_env(
        emu: &Emulator,
        state_dir: &Path,
        args: Vec<String>,
        extra_env: Vec<(String, String)>,
    ) -> Garrison {
        Self::spawn_behind(emu, state_dir, args, extra_env, Vec::new())
    }

    fn spawn_behind(
        emu: &Emulator,
        state_dir: &Path,
        args: Vec<String>,
        extra_env: Vec<(String, String)>,
        prefix: Vec<String>,
    ) -> Garrison {
        let opts = GarrisonOptions {
            outpost: "",
            state_dir,
            extra_args: vec![],
        };
        let env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), opts.state_dir.display().to_string()),
            ("USER".to_owned(), "garrison-test".to_owned()),
            ("DEVIN_OUTPOSTS_TOKEN".to_owned(), emu.account_token()),
            // No credentials file: everything comes from flags and env.
            (
                "GARRISON_CONFIG".to_owned(),
                opts.state_dir.join("no-config").display().to_string(),
            ),
            ("RUST_LOG".to_owned(), "info,orchestrator=debug".to_owned()),
        ];
        let mut env = env;
        if let Some(shim) = std::env::var_os("GARRISON_STATIC_SHIM") {
            env.push((
                "GARRISON_STATIC_SHIM".to_owned(),
                shim.to_string_lossy().into_owned(),
            ));
        }
        env.extend(extra_env);
        let log_path = opts.state_dir.with_extension("log");
        let child = spawn(&prefix, &args, &env, &log_path);
        Garrison {
            child,
            state_dir: opts.state_dir.to_owned(),
            log_path,
            args,
            env,
            prefix,
            tensorlake: None,
            modal: None,
        }
    }

    /// `kill -9`, then a new process with the same arguments and state.
    pub(crate) fn crash_and_restart(&mut self) {
        self.kill9();
        self.child = spawn(&self.prefix, &self.args, &self.env, &self.log_path);
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) the process, as a host
    /// that stops answering for a while.
    pub(crate) fn freeze(&self, frozen: bool) {
        let signal = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The Garrison's state store, once it has created it: creating or
    /// converting it here would race with the Garrison's own start.
    pub(crate) fn store(&self) -> orchestrator::Store {
        use orchestrator::Store;
        let path = self.state_dir.join("garrison.db");
        let deadline = std::time::Instant::now() + HANG_GUARD;
        loop {
            if let Ok(store) = Store::open_existing(&path)
                && store.sessions().is_ok()
            {
                return store;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the state store {} never appeared\n{}",
                path.display(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A mock Modal API keeping its sandboxes under `<state>/modal-mock`, with
/// credentials made up for this test. Needs a multi-thread runtime.
pub(crate) fn start_modal_mock(state_dir: &Path) -> std::sync::Arc<modal_mock::MockModal> {
    let mut config = modal_mock::MockConfig::new(state_dir.join("modal-mock"));
    config.token_id = format!("ak-{:016x}", rand::random::<u64>());
    config.token_secret = format!("as-{:016x}", rand::random::<u64>());
    let mock = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(modal_mock::MockModal::start(config))
    })
    .expect("mock Modal starts");
    std::sync::Arc::new(mock)
}

/// How `garrison` finds the mock: URL, token and base image, by environment.
pub(crate) fn modal_env(mock: &modal_mock::MockModal) -> Vec<(String, String)> {
    vec![
        ("MODAL_SERVER_URL".to_owned(), mock.url()),
        ("MODAL_TOKEN_ID".to_owned(), mock.token_id().to_owned()),
        (
            "MODAL_TOKEN_SECRET".to_owned(),
            mock.token_secret().to_owned(),
        ),
        ("MODAL_IMAGE".to_owned(), mock.base_image_id()),
    ]
}

fn spawn(prefix: &[String], args: &[String], env: &[(String, String)], log_path: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .expect("log file");
    let mut argv: Vec<&str> = prefix.iter().map(String::as_str).collect();
    argv.push(garrison_bin());
    argv.extend(args.iter().map(String::as_str));
    Command::new(argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("garrison starts")
}

impl Drop for Garrison {
    fn drop(&mut self) {
        self.kill9();
        kill_sandbox_processes(&self.state_dir);
        destroy_local_sandboxes(&self.state_dir);
    }
}

/// Destroys containers the local backend left under `state_dir` (they
/// outlive Garrison by design). Runs on its own thread: Drop may be called
/// inside a test's runtime.
pub(crate) fn destroy_local_sandboxes(state_dir: &Path) {
    if !state_dir.join("local").join("sandboxes").exists() {
        return;
    }
    let state_dir = state_dir.to_owned();
    let _ = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let shim = std::env::var_os("GARRISON_STATIC_SHIM")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(garrison_bin()).with_file_name("garrison-shim"));
            let Ok(config) =
                local::LocalConfig::for_state_dir(&state_dir, &state_dir.join("snapshots"), shim)
            else {
                return;
            };
            let Ok(backend) = local::LocalBackend::new(config) else {
                return;
            };
            use sandbox::Sandbox;
            for handle in backend.list().await.unwrap_or_default() {
                let _ = backend.destroy(&handle).await;
            }
        });
    })
    .join();
}

/// Kills what the host backend started under `state_dir` (remotes outlive
/// Garrison by design, so a test cleans them up itself).
pub(crate) fn kill_sandbox_processes(state_dir: &Path) {
    let Ok(sandboxes) = std::fs::read_dir(state_dir.join("host").join("sandboxes")) else {
        return;
    };
    for sandbox in sandboxes.flatten() {
        let Ok(procs) = std::fs::read_dir(sandbox.path().join("proc")) else {
            continue;
        };
        for proc_dir in procs.flatten() {
            if let Ok(record) = std::fs::read_to_string(proc_dir.path().join("child.pid"))
                && let Some(pid) = record
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill(2) on a process group we started.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
            }
        }
    }
}

pub(crate) fn outpost(emu: &Emulator) -> String {
    emu.create_outpost(
        &format!("test-{:08x}", rand::random::<u32>()),
        Platform::Linux,
    )
}

pub(crate) fn run(command: &str) -> Step {
    Step::Run {
        command: command.into(),
    }
}

pub(crate) fn write(path: &str, content: &str) -> Step {
    Step::Write {
        path: path.into(),
        content: content.into(),
    }
}

pub(crate) fn session(emu: &Emulator, outpost_id: &str, steps: Vec<Step>, then: Then) -> String {
    emu.create_session(NewSession {
        outpost_id: outpost_id.into(),
        script: Script { steps, then },
        ..Default::default()
    })
    .expect("session created")
}

/// Polls until `check` holds, panicking with `what` and the Garrison log
/// after [`HANG_GUARD`].
pub(crate) async fn wait_until(
    what: &str,
    garrison: Option<&Garrison>,
    mut check: impl FnMut() -> bool,
) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while !check() {
        if tokio::time::Instant::now() > deadline {
            let log = garrison.map(Garrison::log).unwrap_or_default();
            panic!("timed out waiting for {what}\n--- garrison log ---\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn view(emu: &Emulator, id: &str) -> SessionView {
    emu.session(id).expect("session exists")
}

pub(crate) fn status_is(emu: &Emulator, id: &str, status: SessionStatus) -> bool {
    view(emu, id).session_status == status
}

/// Released by its holder: the last claim was followed by a release.
pub(crate) fn released(emu: &Emulator, id: &str) -> bool {
    let v = view(emu, id);
    v.events("released").count() >= v.events("claimed").count() && v.events("claimed").count() > 0
}

/// The outputs of the session's steps, in order.
pub(crate) fn step_outputs(emu: &Emulator, id: &str) -> Vec<String> {
    view(emu, id)
        .events("step")
        .map(|e| {
            e.detail
                .get("output")
                .and_then(|o| o.as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// Sandboxes of any backend present under `state_dir`.
pub(crate) fn sandbox_dirs(state_dir: &Path) -> usize {
    let tensorlake = state_dir
        .parent()
        .map(|dir| dir.join("tensorlake-mock"))
        .unwrap_or_default();
    [
        state_dir.join("host").join("sandboxes"),
        state_dir.join("local").join("sandboxes"),
        state_dir.join("modal-mock").join("sandboxes"),
        tensorlake.join("sandboxes"),
    ]
    .iter()
    .map(|dir| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0))
    .sum()
}

/// Writes file `name` into a sandbox's workspace from the host, as the
/// workspace's owner: a `local` sandbox in a user namespace shows its files
/// through idmapped layers, which refuse a file made as host root.
pub(crate) fn write_as_workspace_owner(workdir: &Path, name: &str, bytes: &[u8]) {
    use std::os::unix::fs::MetadataExt as _;
    let uid = std::fs::metadata(workdir).unwrap().uid();
    local::rootfs::Root::open_as(workdir, (uid != 0).then_some(uid))
        .and_then(|root| root.write(&format!("/{name}"), bytes, 0o644))
        .unwrap_or_else(|e| panic!("writing {name} into {}: {e}", workdir.display()));
}

/// The workspace of the only sandbox under `state_dir`, as the host sees it.
pub(crate) fn only_workdir(state_dir: &Path) -> PathBuf {
    let mut found = Vec::new();
    let tensorlake = state_dir
        .parent()
        .map(|dir| dir.join("tensorlake-mock"))
        .unwrap_or_default();
    for (dir, inner) in [
        (state_dir.join("host"), "fs/workspace"),
        (state_dir.join("local"), "rootfs/workspace"),
        (state_dir.join("modal-mock"), "garrison/workspace"),
        (tensorlake, "workspace"),
    ] {
        if let Ok(entries) = std::fs::read_dir(dir.join("sandboxes")) {
            found.extend(entries.flatten().map(|e| e.path().join(inner)));
        }
    }
    assert_eq!(found.len(), 1, "one sandbox: {found:?}");
    found.remove(0)
}

/// Waits for a `garrison logs -f` whose output goes to `out` and `err` to
/// exit by itself, checks that it succeeded and returns what it printed.
pub(crate) async fn follower_exit(
    g: &Garrison,
    follower: &mut std::process::Child,
    out: &Path,
    err: &Path,
) -> (String, String) {
    let mut exit = None;
    wait_until("the follower to exit by itself", Some(g), || {
        exit = follower.try_wait().unwrap();
        exit.is_some()
    })
    .await;
    let out = std::fs::read_to_string(out).unwrap();
    let err = std::fs::read_to_string(err).unwrap();
    assert!(exit.unwrap().success(), "{exit:?}\n{out}\n{err}");
    (out, err)
}

/// Files under `root` (snapshots decompressed) that contain `needle`.
pub(crate) fn grep_tree(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    grep_tree_for_any(root, &[needle])
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

/// Like [`grep_tree`] for several needles in one walk: each file holding
/// any of them, with the index of the first needle found.
pub(crate) fn grep_tree_for_any(root: &Path, needles: &[&[u8]]) -> Vec<(PathBuf, usize)> {
    let finders: Vec<_> = needles.iter().map(memchr::memmem::Finder::new).collect();
    let mut hits = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let bytes = if path.to_string_lossy().ends_with(".tar.zst") {
                    zstd_decode(&path)
                } else {
                    std::fs::read(&path).unwrap_or_default()
                };
                if let Some(found) = finders.iter().position(|f| f.find(&bytes).is_some()) {
                    hits.push((path, found));
                }
            }
        }
    }
    hits
}

fn zstd_decode(path: &Path) -> Vec<u8> {
    let out = Command::new("zstd")
        .args(["-d", "-c", "-q"])
        .arg(path)
        .output()
        .expect("zstd is installed by scripts/setup");
    assert!(out.status.success(), "zstd failed on {}", path.display());
    out.stdout
}
