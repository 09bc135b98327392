//! The per-process shim of the host and local backends.
//!
//! A process started by Garrison must outlive Garrison (a restart re-adopts
//! it) and its exit code must still be known afterwards. A process whose
//! parent died is reparented to init, and nobody else can `waitpid` it, so
//! Garrison starts a tiny shim instead: the shim leaves Garrison's session,
//! starts the real process, records its pid, waits for it, and writes its exit
//! code to a file. It uses only the standard library (no async runtime), so
//! it costs little memory per session.
//!
//! The request arrives on stdin as JSON, never in argv, because it carries
//! the process's environment and with it the session's connect token.
//! The shim answers one line on stdout: `ok <pid>` or `err <message>`.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// The hidden argument that turns a binary carrying the shim into the shim.
pub const SHIM_ARG: &str = "__garrison_shim";

/// Largest request accepted on stdin.
const MAX_REQUEST_BYTES: u64 = 4 * 1024 * 1024;

/// The process's combined stdout and stderr, in the process directory.
pub const OUTPUT_FILE: &str = "output.log";
/// The process's `pid start_time` record (see [`is_alive`]).
pub const CHILD_PID_FILE: &str = "child.pid";
/// The process's exit code, written once it has exited.
pub const EXIT_FILE: &str = "exit";

/// What the shim starts, and where it keeps its records.
#[derive(Serialize, Deserialize)]
pub struct ShimRequest {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The complete environment: nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// The working directory.
    pub cwd: PathBuf,
    /// Where the shim writes `output.log`, `child.pid` and `exit`.
    pub dir: PathBuf,
}

/// Inside a container: read the request from `<dir>/request.json` (written
/// by the backend through the container's root filesystem, deleted here at
/// once so the environment it carries does not outlive the start) and
/// report a failure to start in `<dir>/error`.
pub const SHIM_FILE_ARG: &str = "__garrison_shim_file";
/// Inside a container: do nothing, forever (the container's keep-alive
/// process under tini).
pub const IDLE_ARG: &str = "__garrison_idle";

/// Inside a container: `KILL_GROUP_ARG <signal> <pgid>` signals a process
/// group from inside. Under runsc the sandbox's processes live in gVisor's
/// kernel and have no host pid the host could signal.
pub const KILL_GROUP_ARG: &str = "__garrison_killpg";

/// Inside a container: the request, in the process directory (see
/// [`SHIM_FILE_ARG`]).
pub const REQUEST_FILE: &str = "request.json";
/// Inside a container: why the process could not be started.
pub const ERROR_FILE: &str = "error";

/// Dispatches the hidden arguments of a binary that carries the shim;
/// `None` when `args` is none of them.
pub fn dispatch(args: &[String]) -> Option<i32> {
    match args.get(1).map(String::as_str) {
        Some(SHIM_ARG) => Some(run()),
        Some(SHIM_FILE_ARG) => Some(run_from_dir(Path::new(args.get(2)?))),
        Some(KILL_GROUP_ARG) => Some(kill_group(args.get(2)?, args.get(3)?)),
        Some(IDLE_ARG) => loop {
            // SAFETY: pause(2) has no preconditions.
            unsafe {
                libc::pause();
            }
        },
        _ => None,
    }
}

/// The `main` of a binary that is nothing but the shim (`garrison-shim`,
/// and the test binaries of the backends that start it).
pub fn main() -> ! {
    let args: Vec<String> = std::env::args().collect();
    match dispatch(&args) {
        Some(code) => std::process::exit(code),
        None => {
            eprintln!("garrison-shim is started by Garrison's sandbox backends, not by hand");
            std::process::exit(2);
        }
    }
}

/// Sends signal number `signal` to process group `pgid` (see
/// [`KILL_GROUP_ARG`]); 0 when it was sent.
fn kill_group(signal: &str, pgid: &str) -> i32 {
    let (Ok(signal), Ok(pgid)) = (signal.parse::<i32>(), pgid.parse::<i32>()) else {
        return 2;
    };
    // Never 0 or 1 (the caller's own group, init's): only a session's group.
    if pgid <= 1 {
        return 2;
    }
    // SAFETY: kill(2) has no memory preconditions; a negative pid names a
    // process group.
    if unsafe { libc::kill(-pgid, signal) } == 0 {
        0
    } else {
        1
    }
}

/// The shim inside a container (see [`SHIM_FILE_ARG`]).
pub fn run_from_dir(dir: &Path) -> i32 {
    let fail = |message: String| {
        let _ = write_atomically(&dir.join(ERROR_FILE), message.as_bytes());
        1
    };
    let path = dir.join(REQUEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) => return fail(format!("reading request: {e}")),
    };
    let _ = fs::remove_file(&path);
    let request: ShimRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return fail(format!("parsing request: {e}")),
    };
    new_session();
    redirect_stdio_to_null();
    let child = match start(&request) {
        Ok(child) => child,
        Err(e) => return fail(e),
    };
    let code = wait_code(child);
    let _ = write_atomically(&request.dir.join(EXIT_FILE), code.to_string().as_bytes());
    0
}

/// Runs the shim and returns the shim's own exit code.
pub fn run() -> i32 {
    let mut stdout = std::io::stdout();
    let request = match read_request() {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(stdout, "err {e}");
            return 2;
        }
    };
    // Leave Garrison's session and process group: a Ctrl-C or SIGHUP aimed
    // at Garrison must not reach the session's process.
    new_session();

    let child = match start(&request) {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(stdout, "err {e}");
            return 1;
        }
    };
    let pid = child.id();
    let _ = writeln!(stdout, "ok {pid}");
    let _ = stdout.flush();
    // Nobody reads further: a closed pipe must not kill the shim later.
    redirect_stdio_to_null();

    let code = wait_code(child);
    let _ = write_atomically(&request.dir.join(EXIT_FILE), code.to_string().as_bytes());
    0
}

fn read_request() -> Result<ShimRequest, String> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_REQUEST_BYTES)
        .read_to_end(&mut buf)
        .map_err(|e| format!("reading request: {e}"))?;
    serde_json::from_slice(&buf).map_err(|e| format!("parsing request: {e}"))
}

fn start(request: &ShimRequest) -> Result<std::process::Child, String> {
    let (program, args) = request.argv.split_first().ok_or("empty argv")?;
    let output = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(request.dir.join(OUTPUT_FILE))
        .map_err(|e| format!("opening output log: {e}"))?;
    let output_err = output
        .try_clone()
        .map_err(|e| format!("duplicating output log: {e}"))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(request.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&request.cwd)
        .stdin(Stdio::null())
        .stdout(output)
        .stderr(output_err)
        // Its own process group, so a kill reaches everything it started
        // and not the shim.
        .process_group(0);

    let child =
        spawn_retrying_busy_text(&mut command).map_err(|e| format!("starting {program:?}: {e}"))?;
    let record = format!(
        "{} {}",
        child.id(),
        proc_start_time(child.id()).unwrap_or(0)
    );
    write_atomically(&request.dir.join(CHILD_PID_FILE), record.as_bytes())
        .map_err(|e| format!("recording pid: {e}"))?;
    Ok(child)
}

/// Spawns, retrying while the executable is "busy". A binary that was just
/// written can still be open for writing in a sibling process that Garrison
/// forked meanwhile (the descriptor lives until that child's exec closes it),
/// and exec of a file open for writing fails with ETXTBSY for that moment.
fn spawn_retrying_busy_text(command: &mut Command) -> std::io::Result<std::process::Child> {
    const ATTEMPTS: u32 = 100;
    let mut attempt = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn wait_code(mut child: std::process::Child) -> i32 {
    match child.wait() {
        Ok(status) => status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        Err(_) => 255,
    }
}

/// Leaves the caller's session and process group (a failure, only possible
/// for a group leader, leaves the shim where it is).
fn new_session() {
    // SAFETY: setsid(2) takes no arguments and touches no memory of ours.
    unsafe {
        libc::setsid();
    }
}

fn redirect_stdio_to_null() {
    if let Ok(null) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto the standard descriptors of this single-threaded
        // process; `null` stays open for the duration of the calls.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// Writes through a temporary file and a rename, so a reader never sees half
/// a file even if the writer dies.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, bytes)?;
    fs::rename(tmp, path)
}

/// The start time of a process (clock ticks since boot), read from
/// `/proc/PID/stat`. Paired with the pid it identifies a process for good:
/// a reused pid has a different start time.
pub fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces; fields
    // after it are space-separated, start time being the 20th of those.
    let after_comm = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_comm.split(' ').collect();
    // A zombie has exited: it counts as gone.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Whether the process recorded as `pid start_time` is still alive.
pub fn is_alive(record: &str) -> bool {
    let mut parts = record.split_whitespace();
    let (Some(pid), Some(start)) = (parts.next(), parts.next()) else {
        return false;
    };
    match (pid.parse::<u32>(), start.parse::<u64>()) {
        (Ok(pid), Ok(start)) => proc_start_time(pid) == Some(start),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_readable_and_alive() {
        let pid = std::process::id();
        let start = proc_start_time(pid).expect("own stat");
        assert!(is_alive(&format!("{pid} {start}")));
        assert!(!is_alive(&format!("{pid} {}", start + 1)));
        assert!(!is_alive("garbage"));
    }
}
