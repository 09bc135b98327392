//! One `ContainerExec`: a host process, its output in numbered batches per
//! file descriptor, its stdin fed in message order, and its exit code.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::watch;

/// The mock's `PATH` for every process: the environment is otherwise empty,
/// so nothing of the test process (a Modal token, say) leaks in.
pub(crate) const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Default)]
struct Output {
    stdout: Vec<Vec<u8>>,
    stderr: Vec<Vec<u8>>,
    exit: Option<i32>,
}

#[derive(Default)]
struct Input {
    stdin: Option<ChildStdin>,
    /// Index of the last message written.
    written: u64,
    /// Bytes written by offset (the command router's stdin).
    written_bytes: u64,
    pending: BTreeMap<u64, (Vec<u8>, bool)>,
}

pub(crate) struct Exec {
    pub sandbox_id: String,
    pub pid: Option<u32>,
    output: Mutex<Output>,
    input: tokio::sync::Mutex<Input>,
    changed: watch::Sender<u64>,
}

/// Which stream a batch request reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fd {
    Stdout,
    Stderr,
}

/// What [`Exec::batches_after`] found.
pub(crate) struct Batches {
    /// `(batch_index, bytes)`, numbered from 1.
    pub items: Vec<(u64, Vec<u8>)>,
    /// Set once every batch has been handed out and the process ended.
    pub exit: Option<i32>,
    pub total: u64,
}

impl Exec {
    /// Starts `argv` in `cwd` with `env` over the mock's bare environment.
    /// A process that cannot start becomes an exec that printed why and
    /// exited 127, as a shell would report it.
    pub(crate) fn start(
        sandbox_id: &str,
        argv: &[String],
        cwd: &Path,
        env: &[(String, String)],
        merge_stderr: bool,
    ) -> std::sync::Arc<Exec> {
        let (changed, _) = watch::channel(0);
        let mut command = tokio::process::Command::new(argv.first().map_or("", String::as_str));
        command
            .args(argv.iter().skip(1))
            .current_dir(cwd)
            .env_clear()
            .env("PATH", PATH)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(SANDBOX_MARKER, sandbox_id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let spawned = if argv.is_empty() {
            Err(std::io::Error::other("empty command"))
        } else {
            command.spawn()
        };
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let exec = std::sync::Arc::new(Exec {
                    sandbox_id: sandbox_id.to_owned(),
                    pid: None,
                    output: Mutex::new(Output {
                        stdout: vec![format!("exec failed: {e}\n").into_bytes()],
                        stderr: Vec::new(),
                        exit: Some(127),
                    }),
                    input: Default::default(),
                    changed,
                });
                return exec;
            }
        };
        let exec = std::sync::Arc::new(Exec {
            sandbox_id: sandbox_id.to_owned(),
            pid: child.id(),
            output: Mutex::new(Output::default()),
            input: tokio::sync::Mutex::new(Input {
                stdin: child.stdin.take(),
                ..Input::default()
            }),
            changed,
        });
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let runner = exec.clone();
        tokio::spawn(async move {
            let out = stdout.map(|s| tokio::spawn(pump(runner.clone(), s, Fd::Stdout)));
            let err_fd = if merge_stderr { Fd::Stdout } else { Fd::Stderr };
            let err = stderr.map(|s| tokio::spawn(pump(runner.clone(), s, err_fd)));
            let status = child.wait().await;
            for reader in [out, err].into_iter().flatten() {
                let _ = reader.await;
            }
            let code = match status {
                Ok(s) => s.code().unwrap_or_else(|| {
                    128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(9)
                }),
                Err(_) => 255,
            };
            runner.output.lock().unwrap().exit = Some(code);
            runner.changed.send_modify(|v| *v += 1);
        });
        exec
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub(crate) fn exit_code(&self) -> Option<i32> {
        self.output.lock().unwrap().exit
    }

    pub(crate) fn batches_after(&self, fd: Fd, last: u64) -> Batches {
        let output = self.output.lock().unwrap();
        let list = match fd {
            Fd::Stdout => &output.stdout,
            Fd::Stderr => &output.stderr,
        };
        let items = list
            .iter()
            .enumerate()
            .skip(last as usize)
            .map(|(i, bytes)| (i as u64 + 1, bytes.clone()))
            .collect();
        Batches {
            items,
            exit: output.exit,
            total: list.len() as u64,
        }
    }

    /// The bytes of `fd` from byte `offset` on, and whether the stream is
    /// complete (the process ended and all its output was collected).
    pub(crate) fn bytes_from(&self, fd: Fd, offset: u64) -> (Vec<u8>, bool) {
        let output = self.output.lock().unwrap();
        let list = match fd {
            Fd::Stdout => &output.stdout,
            Fd::Stderr => &output.stderr,
        };
        let mut skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let mut data = Vec::new();
        for chunk in list {
            if skip >= chunk.len() {
                skip -= chunk.len();
                continue;
            }
            data.extend_from_slice(&chunk[skip..]);
            skip = 0;
        }
        (data, output.exit.is_some())
    }

    /// Writes `data`, which starts at byte `offset` of the input; bytes
    /// already written (a retried call) are skipped, and a gap is refused.
    pub(crate) async fn write_input_at(
        &self,
        offset: u64,
        data: &[u8],
        eof: bool,
    ) -> Result<(), u64> {
        let mut input = self.input.lock().await;
        if offset > input.written_bytes {
            return Err(input.written_bytes);
        }
        let skip = usize::try_from(input.written_bytes - offset).unwrap_or(usize::MAX);
        if skip < data.len() {
            let fresh = &data[skip..];
            input.written_bytes += fresh.len() as u64;
            if let Some(stdin) = input.stdin.as_mut()
                && stdin.write_all(fresh).await.is_err()
            {
                input.stdin = None;
            }
        }
        if eof {
            input.stdin = None;
        }
        Ok(())
    }

    /// Writes input message `index` once every earlier one is written;
    /// repeated indexes are ignored (a retried call).
    pub(crate) async fn put_input(&self, index: u64, bytes: Vec<u8>, eof: bool) {
        let mut input = self.input.lock().await;
        if index <= input.written {
            return;
        }
        input.pending.insert(index, (bytes, eof));
        loop {
            let next = input.written + 1;
            let Some((bytes, eof)) = input.pending.remove(&next) else {
                break;
            };
            input.written = next;
            if let Some(stdin) = input.stdin.as_mut()
                && stdin.write_all(&bytes).await.is_err()
            {
                input.stdin = None;
            }
            if eof {
                input.stdin = None;
            }
        }
    }
}

async fn pump(exec: std::sync::Arc<Exec>, mut reader: impl AsyncRead + Unpin, fd: Fd) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                {
                    let mut output = exec.output.lock().unwrap();
                    match fd {
                        Fd::Stdout => output.stdout.push(buf[..n].to_vec()),
                        Fd::Stderr => output.stderr.push(buf[..n].to_vec()),
                    }
                }
                exec.changed.send_modify(|v| *v += 1);
            }
        }
    }
}

/// Put in every exec's environment (value: the sandbox id), so that the
/// sandbox's processes are found however they forked (see [`members`]).
pub(crate) const SANDBOX_MARKER: &str = "MODAL_MOCK_SANDBOX_ID";

/// The processes of sandbox `sandbox_id` whose sandbox directory is `dir`,
/// beside those below its execs: any whose environment carries its
/// [`SANDBOX_MARKER`], or whose working directory is inside `dir`. A real
/// sandbox holds all its processes in its container; on the host a process
/// that double-forks into a new session leaves its exec's process group
/// and parentage, and one started with `env -i` (as the backend starts its
/// detached processes) loses the marker, but it keeps a working directory
/// in the sandbox.
pub(crate) fn members(sandbox_id: &str, dir: &Path) -> Vec<u32> {
    let marker = format!("{SANDBOX_MARKER}={sandbox_id}");
    let dir = std::fs::canonicalize(dir).ok();
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let marked = std::fs::read(entry.path().join("environ")).is_ok_and(|environ| {
            environ
                .split(|b| *b == 0)
                .any(|var| var == marker.as_bytes())
        });
        let inside = dir.as_ref().is_some_and(|dir| {
            std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
        });
        if marked || inside {
            found.push(pid);
        }
    }
    found
}

/// Every process whose parent chain leads to one of `roots`, the roots
/// included, from `/proc`: a sandbox's processes may have left the process
/// group of the exec that started them (`setsid`).
pub(crate) fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // The command name may hold spaces; fields resume after ')'.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for (pid, ppid) in &parent_of {
            if *ppid == parent && !found.contains(pid) {
                found.push(*pid);
            }
        }
        i += 1;
    }
    found
}
