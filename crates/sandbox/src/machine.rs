//! What a backend's sandboxes are: architecture, operating system,
//! capabilities, and what a process in one runs as.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::os::Os;

/// The CPU architecture of a backend's sandboxes, which chooses the
/// `devin-remote` build put into them (not the orchestrator's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// 64-bit x86.
    X86_64,
    /// 64-bit ARM.
    Aarch64,
}

impl Arch {
    /// The architecture of the machine this process runs on: that of the
    /// sandboxes of backends that run them on this machine (host, local).
    pub fn current() -> Self {
        match std::env::consts::ARCH {
            "aarch64" => Self::Aarch64,
            _ => Self::X86_64,
        }
    }

    /// Reads `x86_64`/`amd64`/`x64` or `aarch64`/`arm64`, for settings.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "x86_64" | "amd64" | "x64" => Some(Self::X86_64),
            "aarch64" | "arm64" => Some(Self::Aarch64),
            _ => None,
        }
    }
}

impl Default for Arch {
    /// This machine's architecture.
    fn default() -> Self {
        Self::current()
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::X86_64 => "x86_64",
            Self::Aarch64 => "aarch64",
        })
    }
}

/// Where machines and images commonly keep Chrome/Chromium, most likely
/// first: what an imported image and the host are searched for, for
/// `DEVIN_CHROME_PATH`.
pub const CHROME_CANDIDATES: &[&str] = &[
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/headless-shell/headless-shell",
];

/// What a process in a sandbox runs as and what the machine offers the
/// remote beyond the common ground: the spawn contract's `USER`/`LOGNAME`,
/// `DEVIN_CHROME_PATH` and desktop come from here, never from Garrison's
/// own environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInfo {
    /// The user processes in the sandbox run as (`USER`, `LOGNAME`).
    pub user: String,
    /// An executable Chrome/Chromium inside the sandbox, if it has one.
    pub chrome_path: Option<String>,
    /// The X display of a desktop running in the sandbox (`DISPLAY`), when
    /// the backend provides one.
    pub display: Option<String>,
}

impl Default for MachineInfo {
    /// Root, no browser, no desktop: what a fresh cloud sandbox offers.
    fn default() -> Self {
        Self {
            user: "root".to_owned(),
            chrome_path: None,
            display: None,
        }
    }
}

/// What a backend can do beyond the common ground.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The operating system of the sandboxes: the outposts' `platform` the
    /// backend can serve.
    pub os: Os,
    /// The architecture of the sandboxes (the `devin-remote` build they get).
    pub arch: Arch,
    /// `suspend`/`resume` keep memory as well as disk.
    pub suspend_keeps_memory: bool,
    /// Network policies are enforced, not just accepted.
    pub enforces_network_policy: bool,
    /// A process can be started again after the sandbox restarts (restore).
    pub snapshots: bool,
}

/// What [`Sandbox::keep_desktop`](crate::Sandbox::keep_desktop) found of a
/// sandbox's desktop, and did about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DesktopState {
    /// The sandbox has no desktop (or the backend does not look after it).
    NoDesktop,
    /// The X server answers.
    Answering,
    /// The X server was just started and does not answer yet.
    Starting,
    /// The X server was gone or had stopped answering, and was started
    /// again.
    Restarted {
        /// Which of the two, for the session's event log.
        reason: String,
    },
}
