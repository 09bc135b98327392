//! The operating system a backend's sandboxes run, as Devin names an
//! outpost's platform.

use serde::{Deserialize, Serialize};

/// The operating system of a backend's sandboxes, spelled as Devin spells
/// an outpost's `platform` (`linux`, `macos`, `windows`). The remote a
/// session gets is built for it, and Devin's worker "refuses an OS mismatch
/// with a clear message": so does Garrison, before it claims anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Os {
    /// Linux.
    #[default]
    Linux,
    /// macOS.
    Macos,
    /// Windows.
    Windows,
}

impl Os {
    /// The spelling of Devin's `platform`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Macos => "macos",
            Self::Windows => "windows",
        }
    }
}
