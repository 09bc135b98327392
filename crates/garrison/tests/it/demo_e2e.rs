//! `garrison demo` end to end: the real binary, as root, on the local
//! backend with the test image (`GARRISON_TEST_IMAGES`). It picks
//! containers when the machine has what they need, and a stop signal
//! (SIGINT or SIGTERM), with `--keep-running` or in the middle of the
//! scripted sessions, ends it with no container, mount or network link of
//! its sandboxes left. Everything listens on 127.0.0.1.
//!
//! `GARRISON_TEST_DEMO_BUILD=1` adds the first-run case a new user meets:
//! an empty state directory, whose `default` image the demo builds with
//! mmdebstrap from Debian's mirrors (about a minute).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use crate::common::{Backend, garrison_bin};

/// Bounds each wait; a healthy demo needs a fraction of it (the first
/// container start on a busy machine is the slow part).
const GUARD: Duration = Duration::from_secs(400);

/// Whether this machine can run the demo on containers; says why not.
fn can_run() -> bool {
    if !Backend::Local.available() {
        return false;
    }
    for var in ["GARRISON_REMOTE_SIM", "GARRISON_STATIC_SHIM"] {
        if std::env::var_os(var).is_none() {
            eprintln!("skipped: {var} is not set (scripts/setup builds it)");
            return false;
        }
    }
    true
}

/// A running `garrison demo`, its stdout read line by line.
struct Demo {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Demo {
    fn start(home: &Path, args: &[&str]) -> Demo {
        let mut cmd = Command::new(garrison_bin());
        cmd.arg("demo")
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("GARRISON_CONFIG", home.join("no-config"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for var in ["GARRISON_REMOTE_SIM", "GARRISON_STATIC_SHIM"] {
            if let Some(value) = std::env::var_os(var) {
                cmd.env(var, value);
            }
        }
        let mut child = cmd.spawn().expect("garrison demo starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Demo {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The first line (from now) that `matches`; panics with the output so
    /// far when the demo ends first or the guard runs out.
    fn wait_line(&mut self, what: &str, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    println!("demo: {line}");
                    self.seen.push(line.clone());
                    if matches(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no {what} in time:\n{}", self.output()),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the demo ended without {what}:\n{}", self.output())
                }
            }
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Its exit status once it ended, all of its output read.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + GUARD;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    println!("demo: {line}");
                    self.seen.push(line);
                }
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the demo did not end:\n{}",
                self.output()
            );
            while let Ok(line) = self.lines.try_recv() {
                println!("demo: {line}");
                self.seen.push(line);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn output(&self) -> String {
        self.seen.join("\n")
    }
}

impl Drop for Demo {
    /// A failed test still ends the demo the way a user would, so its
    /// sandboxes go too.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(120);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A test's directory, removed at the end unless something is still
/// mounted in it: a sandbox a failed test left holds an idmapped, writable
/// mount of the shared test image, which removing the directory would
/// empty.
struct Scratch(Option<tempfile::TempDir>);

impl Scratch {
    fn new() -> Scratch {
        Scratch(Some(tempfile::tempdir().unwrap()))
    }

    fn path(&self) -> &Path {
        self.0.as_ref().unwrap().path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let dir = self.0.take().unwrap();
        let text = dir.path().to_string_lossy().into_owned();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        if mounts.contains(&text) {
            eprintln!("kept {text}: something is still mounted in it");
            let _ = dir.keep();
        }
    }
}

/// A demo state directory whose image store is the test images (read
/// only for the demo: it finds `default` there).
fn seeded_state_dir(tmp: &Path) -> PathBuf {
    let state = tmp.join("demo-state");
    std::fs::create_dir_all(&state).unwrap();
    let images = std::env::var_os("GARRISON_TEST_IMAGES").expect("GARRISON_TEST_IMAGES");
    std::os::unix::fs::symlink(images, state.join("images")).unwrap();
    state
}

/// What of the demo's sandboxes exists on the host right now.
#[derive(Debug, Default)]
struct Traces {
    /// Directories under `local/sandboxes`.
    sandboxes: Vec<String>,
    /// Lines of /proc/self/mountinfo under the state directory.
    mounts: Vec<String>,
    /// Containers in the runtime's state (`runc list`).
    containers: Vec<String>,
    /// Network namespaces named after a sandbox.
    netns: Vec<String>,
    /// The host's side of their veth pairs (`gv...`), where they exist.
    links: Vec<String>,
}

impl Traces {
    /// The traces of the sandboxes named `names` (each sandbox's network
    /// namespace and link are found from its name).
    fn of(state: &Path, names: &[String]) -> Traces {
        let local = state.join("local");
        let sandboxes = list_dir(&local.join("sandboxes"));
        let state_text = state.to_string_lossy().into_owned();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&state_text))
            .map(str::to_owned)
            .collect();
        let runc = Command::new("runc")
            .arg("--root")
            .arg(local.join("runc"))
            .args(["list", "-q"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let containers = runc.lines().map(str::to_owned).collect();
        let netns: Vec<String> = list_dir(Path::new("/run/netns"))
            .into_iter()
            .filter(|ns| names.iter().any(|n| ns.starts_with(&format!("{n}-"))))
            .collect();
        let links = netns
            .iter()
            .map(|ns| format!("gv{}", &sandbox::hashed_id(ns)[..10]))
            .filter(|link| {
                Command::new("ip")
                    .args(["link", "show", "dev", link])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .collect();
        Traces {
            sandboxes,
            mounts,
            containers,
            netns,
            links,
        }
    }

    fn is_empty(&self) -> bool {
        self.sandboxes.is_empty()
            && self.mounts.is_empty()
            && self.containers.is_empty()
            && self.netns.is_empty()
            && self.links.is_empty()
    }
}

fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until a sandbox of the demo runs a container; returns the
/// sandboxes' names and what they have on the host then.
fn wait_for_a_container(demo: &mut Demo, state: &Path) -> (Vec<String>, Traces) {
    let deadline = Instant::now() + GUARD;
    loop {
        let names = list_dir(&state.join("local").join("sandboxes"));
        let traces = Traces::of(state, &names);
        if !traces.containers.is_empty() && !traces.links.is_empty() {
            return (names, traces);
        }
        assert!(
            demo.child.try_wait().unwrap().is_none(),
            "the demo ended before a sandbox ran:\n{}",
            demo.output()
        );
        assert!(
            Instant::now() < deadline,
            "no sandbox ran: {traces:?}\n{}",
            demo.output()
        );
        while let Ok(line) = demo.lines.try_recv() {
            println!("demo: {line}");
            demo.seen.push(line);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_demo_runs_on_containers_when_the_image_is_there() {
    if !can_run() {
        return;
    }
    let tmp = Scratch::new();
    let state = seeded_state_dir(tmp.path());
    let mut demo = Demo::start(
        tmp.path(),
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let choice = demo.wait_line("the backend's line", |l| l.starts_with("using the"));
    assert_eq!(choice, "using the local backend (containers)");
    demo.wait_line("the closing count", |l| l.starts_with("demo: "));
    let status = demo.wait_exit();
    let output = demo.output();
    assert!(status.success(), "{status}:\n{output}");
    assert!(output.contains(", 0 failed"), "{output}");
    assert!(Traces::of(&state, &[]).is_empty(), "{output}");
}

/// The case: Ctrl-C while `--keep-running` serves, with a session
/// of the user's running in a container.
#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_on_keep_running_removes_the_running_sandbox() {
    if !can_run() {
        return;
    }
    let tmp = Scratch::new();
    let state = seeded_state_dir(tmp.path());
    let mut demo = Demo::start(
        tmp.path(),
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--keep-running",
        ],
    );
    let serving = demo.wait_line("the still-serving line", |l| {
        l.starts_with("still serving:")
    });
    // "... the emulator is at URL (outpost ID); Ctrl-C stops"
    let after = serving.split("the emulator is at ").nth(1).unwrap();
    let (url, rest) = after.split_once(" (outpost ").unwrap();
    let outpost = rest.split_once(')').unwrap().0;
    let created: serde_json::Value = reqwest::Client::new()
        .post(format!("{url}/_emulator/sessions"))
        .json(&serde_json::json!({
            "outpost_id": outpost,
            "script": {"steps": [{"run": {"command": "echo waiting"}}], "then": "wait"},
        }))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(created["session_id"].is_string(), "{created}");

    let (names, running) = tokio::task::block_in_place(|| wait_for_a_container(&mut demo, &state));
    assert!(!running.mounts.is_empty(), "{running:?}");

    demo.signal(libc::SIGINT);
    let status = tokio::task::block_in_place(|| demo.wait_exit());
    let output = demo.output();
    assert!(
        status.code().is_some(),
        "killed by a signal: {status}\n{output}"
    );
    let left = Traces::of(&state, &names);
    assert!(left.is_empty(), "left behind: {left:?}\n{output}");
}

/// SIGTERM in the middle of the scripted sessions, then again (do not
/// wait for Garrison to end them): whatever Garrison had not cleaned up
/// yet, the demo removes.
#[test]
fn sigterm_during_the_sessions_removes_their_sandboxes() {
    if !can_run() {
        return;
    }
    let tmp = Scratch::new();
    let state = seeded_state_dir(tmp.path());
    let mut demo = Demo::start(
        tmp.path(),
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let (names, _) = wait_for_a_container(&mut demo, &state);
    demo.signal(libc::SIGTERM);
    demo.wait_line("the interruption", |l| {
        l.starts_with("interrupted: ending the demo's sessions")
    });
    // The wind-down may be over already; either way nothing may be left.
    demo.signal(libc::SIGTERM);
    let status = demo.wait_exit();
    let output = demo.output();
    // Interrupted is not a passed demo.
    assert_eq!(status.code(), Some(1), "{output}");
    let left = Traces::of(&state, &names);
    assert!(left.is_empty(), "left behind: {left:?}\n{output}");
}

/// A new user's first run: nothing in the state directory, so the demo
/// builds the `default` image there (with `image build`'s progress) and
/// runs on containers. Opt-in: it needs Debian's mirrors and a minute.
#[test]
fn on_an_empty_state_dir_the_demo_builds_its_image_and_uses_containers() {
    if std::env::var_os("GARRISON_TEST_DEMO_BUILD").is_none() {
        eprintln!(
            "skipped: set GARRISON_TEST_DEMO_BUILD=1 to build an image from Debian's mirrors"
        );
        return;
    }
    if !can_run() {
        return;
    }
    let tmp = Scratch::new();
    let state = tmp.path().join("demo-state");
    let mut demo = Demo::start(
        tmp.path(),
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
    );
    demo.wait_line("the build's announcement", |l| {
        l.starts_with("the container image \"default\" is missing: building it into")
    });
    let choice = demo.wait_line("the backend's line", |l| l.starts_with("using the"));
    assert_eq!(choice, "using the local backend (containers)");
    let status = demo.wait_exit();
    let output = demo.output();
    assert!(status.success(), "{status}:\n{output}");
    assert!(output.contains(", 0 failed"), "{output}");
    assert!(state.join("images/names/default").is_file(), "{output}");
}
