//! A host sandbox's processes, as the files their shims keep in
//! `proc/<id>/`.

use std::fs;
use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use sandbox::ProcessStatus;
use shim::{CHILD_PID_FILE, EXIT_FILE};

/// Where a process's shim records its own pid.
pub(crate) const SHIM_PID_FILE: &str = "shim.pid";

/// A process's state from the files its shim keeps in `dir`.
pub(crate) fn process_status(dir: &Path) -> ProcessStatus {
    if let Ok(code) = fs::read_to_string(dir.join(EXIT_FILE)) {
        return ProcessStatus::Exited(code.trim().parse().unwrap_or(255));
    }
    let alive = |file: &str| fs::read_to_string(dir.join(file)).is_ok_and(|r| shim::is_alive(&r));
    if alive(SHIM_PID_FILE) || alive(CHILD_PID_FILE) {
        return ProcessStatus::Running;
    }
    // The shim may have written the exit file between the two reads.
    match fs::read_to_string(dir.join(EXIT_FILE)) {
        Ok(code) => ProcessStatus::Exited(code.trim().parse().unwrap_or(255)),
        Err(_) => ProcessStatus::Lost,
    }
}

/// Signals the process group recorded in `dir`, if it still runs.
pub(crate) fn signal_group(dir: &Path, signal: Signal) {
    if let Ok(record) = fs::read_to_string(dir.join(CHILD_PID_FILE))
        && shim::is_alive(&record)
        && let Some(pid) = record
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<i32>().ok())
    {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// The process directories of the sandbox at `sandbox_dir`.
pub(crate) fn process_dirs(sandbox_dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(sandbox_dir.join("proc"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}
