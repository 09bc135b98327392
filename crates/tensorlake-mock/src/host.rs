//! What the mock does on the host: paths inside a sandbox's directory,
//! processes in their own process groups, snapshot archives.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

use crate::group::Group;

/// Longest output line kept; the rest of a longer line is dropped.
const MAX_LINE: usize = 64 * 1024;
/// Lines kept per process; older ones are dropped.
const MAX_LINES: usize = 200_000;

/// A host path for `path` given to sandbox `dir`: absolute, only normal
/// components, inside `dir`, and through no symbolic link (one made inside
/// the sandbox could point out of it).
pub(crate) fn inside(dir: &Path, path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    let clean = p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let relative = p.strip_prefix(dir).ok().filter(|_| clean)?;
    let mut walked = dir.to_path_buf();
    for component in relative.components() {
        walked.push(component);
        if std::fs::symlink_metadata(&walked).is_ok_and(|m| m.file_type().is_symlink()) {
            return None;
        }
    }
    Some(p.to_path_buf())
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
}

#[derive(Default)]
pub(crate) struct ProcState {
    pub exit: Option<Exit>,
    /// `(stream, line)`.
    pub lines: Vec<(&'static str, String)>,
    /// Lines dropped from the front.
    pub dropped: usize,
}

/// A process the mock started.
pub(crate) struct Proc {
    pub pid: i64,
    /// Its process group (id `pid`), signalled only while it is its own.
    pub group: Group,
    pub name: Option<String>,
    pub command: String,
    pub args: Vec<String>,
    pub started_ms: i64,
    pub state: Mutex<ProcState>,
    /// Bumped on every new line and on exit.
    pub changed: watch::Sender<u64>,
}

impl Proc {
    /// The record of process `pid`, just started (group id `pid`).
    pub(crate) fn new(pid: i64, name: Option<String>, command: String, args: Vec<String>) -> Self {
        Self {
            pid,
            group: Group::new(pid as i32),
            name,
            command,
            args,
            started_ms: now_ms(),
            state: Mutex::new(ProcState::default()),
            changed: watch::channel(0).0,
        }
    }

    pub(crate) fn info(&self) -> serde_json::Value {
        let state = self.state.lock().expect("proc");
        let (status, exit_code, signal) = match state.exit {
            None => ("running", None, None),
            Some(Exit::Code(c)) => ("exited", Some(c), None),
            Some(Exit::Signal(s)) => ("signaled", None, Some(s)),
        };
        let ended = exit_code.is_some() || signal.is_some();
        serde_json::json!({
            "pid": self.pid,
            "status": status,
            "exit_code": exit_code,
            "signal": signal,
            "command": self.command,
            "args": self.args,
            // The daemon's form: Unix seconds with a fraction.
            "started_at": self.started_ms as f64 / 1000.0,
            "stdin_writable": false,
            "managed": self.name.as_ref().map(|n| managed_info(n, ended)),
        })
    }

    pub(crate) fn running(&self) -> bool {
        self.state.lock().expect("proc").exit.is_none()
    }

    fn push(&self, stream: &'static str, line: String) {
        let mut state = self.state.lock().expect("proc");
        state.lines.push((stream, line));
        if state.lines.len() > MAX_LINES {
            state.lines.remove(0);
            state.dropped += 1;
        }
        drop(state);
        self.changed.send_modify(|v| *v += 1);
    }
}

/// A named process's supervision record, as the daemon reports it: the mock
/// never restarts and checks no health.
fn managed_info(name: &str, ended: bool) -> serde_json::Value {
    serde_json::json!({
        "id": name,
        "name": name,
        "status": if ended { "stopped" } else { "running" },
        "restart_count": 0,
        "restart": {
            "policy": "never",
            "initial_backoff_ms": 500,
            "max_backoff_ms": 30_000,
        },
        "health_status": "disabled",
        "consecutive_health_failures": 0,
    })
}

/// The process `key` names among a sandbox's (started first first): by
/// name, or by pid the newest with that pid. Records of exited processes
/// are kept, and once one is reaped the kernel may give its pid to a new
/// process of the same sandbox: the pid then means the new one (as the
/// sandbox's daemon, keeping one record per pid, answers), never the
/// exited one whose output and exit a follow would otherwise return.
pub(crate) fn lookup<'a>(processes: &'a [Arc<Proc>], key: &str) -> Option<&'a Arc<Proc>> {
    let by_pid = key.bytes().all(|b| b.is_ascii_digit());
    processes.iter().rev().find(|p| {
        if by_pid {
            p.pid.to_string() == key
        } else {
            p.name.as_deref() == Some(key)
        }
    })
}

/// What to run.
pub(crate) struct Launch {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub name: Option<String>,
}

/// Starts a process in its own process group with exactly `env`, its
/// output collected line by line.
pub(crate) fn spawn(launch: Launch) -> std::io::Result<Arc<Proc>> {
    let mut child = tokio::process::Command::new(&launch.command)
        .args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(&launch.cwd)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id().unwrap_or(0) as i64;
    let proc = Arc::new(Proc::new(pid, launch.name, launch.command, launch.args));
    let stdout = child
        .stdout
        .take()
        .map(|s| read_lines(proc.clone(), "stdout", s));
    let stderr = child
        .stderr
        .take()
        .map(|s| read_lines(proc.clone(), "stderr", s));
    let waiter = proc.clone();
    tokio::spawn(async move {
        let status = waiter.group.reap(&mut child).await;
        // Output still in the pipes belongs before the exit; a child left
        // holding them (a daemon) must not keep the exit from being seen.
        for reader in [stdout, stderr].into_iter().flatten() {
            let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
        }
        let exit = match status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                match (s.code(), s.signal()) {
                    (Some(c), _) => Exit::Code(c),
                    (None, Some(sig)) => Exit::Signal(sig),
                    _ => Exit::Code(255),
                }
            }
            Err(_) => Exit::Code(255),
        };
        waiter.state.lock().expect("proc").exit = Some(exit);
        waiter.changed.send_modify(|v| *v += 1);
    });
    Ok(proc)
}

fn read_lines(
    proc: Arc<Proc>,
    stream: &'static str,
    pipe: impl AsyncRead + Unpin + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut reader = BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if buf.last() == Some(&b'\n') {
                        buf.pop();
                    }
                    buf.truncate(MAX_LINE);
                    proc.push(stream, String::from_utf8_lossy(&buf).into_owned());
                }
            }
        }
    })
}

/// Unix milliseconds now (one clock for the whole workspace).
pub(crate) use common::now_ms;

/// Archives `dir` into `archive` (symlinks kept as links); its size.
pub(crate) fn pack(dir: &Path, archive: &Path) -> std::io::Result<u64> {
    let tmp = archive.with_extension("partial");
    let file = std::fs::File::create(&tmp)?;
    let mut builder = tar::Builder::new(file);
    builder.follow_symlinks(false);
    builder.append_dir_all(".", dir)?;
    let file = builder.into_inner()?;
    file.sync_all()?;
    let size = file.metadata()?.len();
    std::fs::rename(&tmp, archive)?;
    Ok(size)
}

/// Restores an archive made by [`pack`] into `dir`.
pub(crate) fn unpack(archive: &Path, dir: &Path) -> std::io::Result<()> {
    let mut tar = tar::Archive::new(std::fs::File::open(archive)?);
    tar.set_preserve_permissions(true);
    tar.set_preserve_mtime(true);
    tar.unpack(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid reused within one sandbox names the process that has it now:
    /// the reuse is forced by giving two records one pid.
    #[test]
    fn a_reused_pid_names_the_newest_process() {
        let old = Arc::new(Proc::new(4242, None, "mkdir".into(), Vec::new()));
        old.state.lock().unwrap().exit = Some(Exit::Code(0));
        let named = Arc::new(Proc::new(7, Some("daemon".into()), "sh".into(), Vec::new()));
        let new = Arc::new(Proc::new(4242, None, "sh".into(), Vec::new()));
        let processes = [old, named.clone(), new.clone()];
        let found = lookup(&processes, "4242").expect("found");
        assert!(Arc::ptr_eq(found, &new), "the exited process was found");
        assert!(found.running());
        assert!(Arc::ptr_eq(lookup(&processes, "daemon").unwrap(), &named));
        assert!(lookup(&processes, "4243").is_none());
    }

    #[test]
    fn symbolic_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sb");
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("out")).unwrap();
        let at = |rel: &str| format!("{}/{rel}", root.display());
        assert!(inside(&root, &at("real/new.txt")).is_some());
        assert!(inside(&root, &at("out/passwd")).is_none());
        assert!(inside(&root, &at("out")).is_none());
    }

    #[test]
    fn paths_must_stay_inside() {
        let dir = Path::new("/r/sandboxes/abc");
        assert!(inside(dir, "/r/sandboxes/abc/workspace/f").is_some());
        for bad in [
            "/r/sandboxes/abc/../def/f",
            "/r/sandboxes/abcd/f",
            "relative",
            "/etc/passwd",
        ] {
            assert!(inside(dir, bad).is_none(), "{bad}");
        }
    }
}
