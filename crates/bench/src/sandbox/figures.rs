//! The figures of `garrison bench sandbox` each phase fills in, and the
//! table header every section of its report shares.

use std::fmt::Write as _;

use crate::report::Summary;

/// How the sandboxes were made.
#[derive(Clone, Debug, Default)]
pub(super) struct Setup {
    pub backend: String,
    /// The local backend's OCI runtime (`runc`, `runsc`).
    pub runtime: Option<String>,
    pub image: Option<String>,
    pub cpus: f64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    pub binary_bytes: u64,
}

/// Create -> remote started, one sandbox after another, and destroy.
#[derive(Clone, Debug, Default)]
pub(super) struct Lifecycle {
    /// `create` returned: the sandbox is running.
    pub create: Summary,
    /// The remote binary written into the sandbox.
    pub put: Summary,
    /// `spawn` returned: the shim has started the process.
    pub spawn: Summary,
    /// Spawn returned -> the remote's first line read back, status Running.
    pub first_output: Summary,
    /// The headline: create called -> first line read back.
    pub total: Summary,
    pub destroy: Summary,
}

/// Snapshot and restore of a workspace of many small files.
#[derive(Clone, Debug, Default)]
pub(super) struct Snapshots {
    pub files: u64,
    /// Bytes in the workspace's files, as `find` counts them inside.
    pub workspace_bytes: u64,
    /// Time to generate them inside the sandbox (not a figure; context).
    pub fill_secs: f64,
    pub archive_bytes: u64,
    /// `snapshot`, seconds.
    pub snapshot: Summary,
    /// `create` with `restore_from`, seconds.
    pub restore: Summary,
    /// Files and bytes found in the last restored sandbox.
    pub restored_files: u64,
    pub restored_bytes: u64,
}

impl Snapshots {
    /// Workspace MB (10^6 bytes) per second at a duration of `secs`.
    pub(super) fn mb_per_s(&self, secs: f64) -> f64 {
        if secs <= 0.0 {
            return 0.0;
        }
        self.workspace_bytes as f64 / 1e6 / secs
    }

    pub(super) fn verified(&self) -> bool {
        self.files > 0
            && self.restored_files == self.files
            && self.restored_bytes == self.workspace_bytes
    }
}

/// One kind of helper (by executable name) across the idle sandboxes.
#[derive(Clone, Debug, Default)]
pub(super) struct HelperKind {
    pub name: String,
    /// Resident size per process, MiB.
    pub rss_mib: Summary,
}

/// Resident memory outside and inside the idle sandboxes.
#[derive(Clone, Debug, Default)]
pub(super) struct Memory {
    pub idle_sandboxes: usize,
    pub helpers: Vec<HelperKind>,
    /// Sum over one sandbox's helpers, MiB.
    pub per_sandbox_mib: Summary,
    /// Sum over the processes inside one sandbox, MiB (charged to the
    /// sandbox's own memory limit; for context).
    pub inside_mib: Summary,
    /// `comm pid rss` of the first sandbox's helpers, for the reader.
    pub example: Vec<String>,
}

impl Memory {
    pub(super) fn max_helper_mib(&self) -> f64 {
        self.helpers
            .iter()
            .map(|h| h.rss_mib.max)
            .fold(0.0, f64::max)
    }
}

/// A section's column headings under `title`.
pub(super) fn header(out: &mut String, title: &str) {
    let _ = writeln!(
        out,
        "{title:<48} {:>10} {:>10} {:>10} {:>10} {:>5}",
        "p50", "p99", "mean", "max", "n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_and_verification() {
        let n = Snapshots {
            files: 2,
            workspace_bytes: 200_000_000,
            restored_files: 2,
            restored_bytes: 200_000_000,
            ..Default::default()
        };
        assert_eq!(n.mb_per_s(0.5), 400.0);
        assert_eq!(n.mb_per_s(0.0), 0.0);
        assert!(n.verified());
        assert!(
            !Snapshots {
                restored_files: 1,
                ..n
            }
            .verified()
        );
    }
}
