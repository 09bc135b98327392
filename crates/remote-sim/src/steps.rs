//! The work the gateway asks for: shell commands and file writes.
//!
//! Both run in the remote's working directory, the one the orchestrator
//! started it in (the directory holding the session's repositories).

use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path};
use std::process::{ExitStatus, Stdio};

use gateway_proto::MAX_OUTPUT_BYTES;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::Command;

use crate::config::CONNECT_TOKEN;

/// What a step produced, ready to become a `Result` message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StepResult {
    pub exit_code: i32,
    pub output: String,
    pub truncated: bool,
}

impl StepResult {
    fn failed(message: String) -> StepResult {
        StepResult {
            exit_code: 1,
            output: message,
            truncated: false,
        }
    }
}

/// Runs `sh -c command` in the working directory with stdin closed,
/// capturing stdout and stderr interleaved as a terminal would show them.
pub(crate) async fn exec(command: &str) -> StepResult {
    match run_shell(command).await {
        Ok(result) => result,
        // `sh` itself could not start: report it the way a shell reports a
        // missing command, so the brain sees a failed step, not silence.
        Err(err) => StepResult {
            exit_code: 127,
            output: format!("devin-remote-sim: cannot run sh: {err}\n"),
            truncated: false,
        },
    }
}

async fn run_shell(command: &str) -> io::Result<StepResult> {
    // One pipe for both streams keeps their relative order.
    let (sender, mut receiver) = pipe::pipe()?;
    let stdout = sender.into_blocking_fd()?;
    let stderr = stdout.try_clone()?;
    let mut child = {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // The token is for the remote alone; the shells it starts run
            // the agent's commands, which must not be able to read it.
            .env_remove(CONNECT_TOKEN)
            .kill_on_drop(true);
        cmd.spawn()?
        // `cmd` drops here with our copies of the write end, so the read
        // end sees EOF once the child (and anything it started) is done.
    };

    let mut capture = Capture::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut eof = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            read = receiver.read(&mut buf), if !eof => match read? {
                0 => eof = true,
                n => capture.push(&buf[..n]),
            },
        }
    };
    if !eof {
        // The shell exited but a background job may still hold the pipe
        // open. Take what is already buffered and stop there rather than
        // wait for a process the step did not wait for either.
        let mut rest = std::fs::File::from(receiver.into_nonblocking_fd()?);
        loop {
            match rest.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => capture.push(&buf[..n]),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) => return Err(err),
            }
        }
    }
    let (output, truncated) = capture.finish();
    Ok(StepResult {
        exit_code: exit_code(status),
        output,
        truncated,
    })
}

/// Shell convention: a child killed by signal N reports 128 + N.
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1)
}

/// Output kept up to [`MAX_OUTPUT_BYTES`]; the rest is read and dropped so
/// a chatty command never blocks on a full pipe.
#[derive(Default)]
struct Capture {
    kept: Vec<u8>,
    dropped: bool,
}

impl Capture {
    fn push(&mut self, bytes: &[u8]) {
        let room = MAX_OUTPUT_BYTES.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.dropped |= bytes.len() > room;
    }

    fn finish(self) -> (String, bool) {
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        // Replacement characters for invalid bytes (or a character cut at
        // the limit) can push the text past the limit; cut again on a
        // character boundary so the limit holds for what is sent.
        let mut truncated = self.dropped;
        if text.len() > MAX_OUTPUT_BYTES {
            let mut end = MAX_OUTPUT_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            truncated = true;
        }
        (text, truncated)
    }
}

/// Writes `content` to `path` under the working directory, creating parent
/// directories. Absolute paths and `..` are refused: the gateway names files
/// in the workspace, never elsewhere on the machine.
pub(crate) async fn write_file(path: &str, content: &str) -> StepResult {
    if let Err(reason) = check_relative(path) {
        return StepResult::failed(format!("refusing to write {path:?}: {reason}\n"));
    }
    let target = Path::new(path);
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty())
        && let Err(err) = tokio::fs::create_dir_all(parent).await
    {
        return StepResult::failed(format!("cannot create {}: {err}\n", parent.display()));
    }
    match tokio::fs::write(target, content).await {
        Ok(()) => StepResult {
            exit_code: 0,
            output: String::new(),
            truncated: false,
        },
        Err(err) => StepResult::failed(format!("cannot write {path:?}: {err}\n")),
    }
}

fn check_relative(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("empty path");
    }
    let mut names = 0;
    for component in Path::new(path).components() {
        match component {
            Component::Normal(_) => names += 1,
            Component::CurDir => {}
            Component::ParentDir => return Err("\"..\" is not allowed"),
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute paths are not allowed");
            }
        }
    }
    if names == 0 {
        return Err("no file name");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_only() {
        assert!(check_relative("a/b.txt").is_ok());
        assert!(check_relative("./a").is_ok());
        assert!(check_relative("/etc/passwd").is_err());
        assert!(check_relative("../x").is_err());
        assert!(check_relative("a/../../x").is_err());
        assert!(check_relative("a/..").is_err());
        assert!(check_relative("").is_err());
        assert!(check_relative(".").is_err());
    }

    #[test]
    fn capture_stops_at_the_limit() {
        let mut capture = Capture::default();
        capture.push(&vec![b'x'; MAX_OUTPUT_BYTES - 1]);
        capture.push(b"yz");
        let (text, truncated) = capture.finish();
        assert_eq!(text.len(), MAX_OUTPUT_BYTES);
        assert!(text.ends_with('y'));
        assert!(truncated);
    }

    #[test]
    fn capture_cut_inside_a_character_stays_within_the_limit() {
        let mut capture = Capture::default();
        capture.push(&vec![b'x'; MAX_OUTPUT_BYTES - 1]);
        capture.push("é".as_bytes());
        let (text, truncated) = capture.finish();
        assert!(text.len() <= MAX_OUTPUT_BYTES);
        assert!(truncated);
    }

    #[tokio::test]
    async fn exec_interleaves_streams_and_reports_exit_code() {
        let result = exec("echo out; echo err >&2; exit 3").await;
        assert_eq!(result.exit_code, 3);
        assert_eq!(result.output, "out\nerr\n");
        assert!(!result.truncated);
    }

    #[tokio::test]
    async fn exec_does_not_wait_for_background_jobs() {
        // `sleep` inherits the output pipe and outlives the shell.
        let result = exec("echo hi; sleep 5 & echo bye").await;
        assert_eq!(result.output, "hi\nbye\n");
    }

    #[tokio::test]
    async fn exec_truncates_large_output() {
        let result = exec("head -c 200000 /dev/zero | tr '\\0' a").await;
        assert_eq!(result.exit_code, 0);
        assert_eq!(result.output.len(), MAX_OUTPUT_BYTES);
        assert!(result.truncated);
    }
}
