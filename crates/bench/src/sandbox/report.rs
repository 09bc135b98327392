//! The report of `garrison bench sandbox`: the printed table and the
//! one-line JSON object, each target checked next to its figure.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::figures::{Lifecycle, Memory, Setup, Snapshots, header};
use super::peer::PeerFigures;
use super::policy::PolicyFigures;
use super::workload::Workload;
use crate::report::{round, row, verdict};

/// Create -> remote started, p50.
pub(super) const TARGET_START_P50_MS: f64 = 150.0;
/// Snapshot of the ~200 MB workspace, p50.
pub(super) const TARGET_SNAPSHOT_P50_S: f64 = 1.5;
/// Destroy of a sandbox whose process runs, p50.
pub(super) const TARGET_DESTROY_P50_MS: f64 = 200.0;
/// Restore (create from the snapshot) of the ~200 MB workspace, p50.
pub(super) const TARGET_RESTORE_P50_S: f64 = 1.0;
/// No per-sandbox helper process above this resident size, MiB (memory
/// figures are MiB, as `free -m` and `ps` count; throughput MB are 10^6).
pub(super) const TARGET_HELPER_RSS_MIB: f64 = 10.0;

/// Everything one run measured.
#[derive(Clone, Debug, Default)]
pub(super) struct Report {
    pub setup: Setup,
    pub lifecycle: Lifecycle,
    pub memory: Memory,
    pub snapshots: Snapshots,
    /// `--policy`: start latency and throughput with a network policy.
    pub policy: Option<PolicyFigures>,
    /// `--peer`: the same start and removal by another container engine.
    pub peer: Option<PeerFigures>,
    pub workload: Option<Workload>,
}

impl Report {
    fn start_ok(&self) -> bool {
        self.lifecycle.total.n > 0 && self.lifecycle.total.p50 < TARGET_START_P50_MS
    }

    fn destroy_ok(&self) -> bool {
        self.lifecycle.destroy.n > 0 && self.lifecycle.destroy.p50 < TARGET_DESTROY_P50_MS
    }

    fn restore_ok(&self) -> bool {
        self.snapshots.restore.n > 0 && self.snapshots.restore.p50 < TARGET_RESTORE_P50_S
    }

    fn snapshot_ok(&self) -> bool {
        self.snapshots.snapshot.n > 0 && self.snapshots.snapshot.p50 < TARGET_SNAPSHOT_P50_S
    }

    fn helpers_ok(&self) -> bool {
        self.memory.max_helper_mib() <= TARGET_HELPER_RSS_MIB
    }

    /// The human-readable table.
    pub(super) fn table(&self) -> String {
        let mut out = String::new();
        let s = &self.setup;
        let l = &self.lifecycle;
        let _ = writeln!(
            out,
            "garrison bench sandbox: {} backend{}, image {}, {} cpu / {} MB memory / {} MB disk, {} sandboxes one after another",
            s.backend,
            s.runtime
                .as_deref()
                .map(|r| format!(" on {r}"))
                .unwrap_or_default(),
            s.image.as_deref().unwrap_or("-"),
            s.cpus,
            s.memory_mb,
            s.disk_mb,
            l.total.n
        );
        let _ = writeln!(out);
        header(&mut out, "create -> remote started (ms)");
        row(&mut out, "  create (sandbox running)", &l.create);
        row(
            &mut out,
            &format!("  put devin-remote ({:.1} MB)", s.binary_bytes as f64 / 1e6),
            &l.put,
        );
        row(&mut out, "  spawn (the shim started it)", &l.spawn);
        row(
            &mut out,
            "  -> its first output line, Running",
            &l.first_output,
        );
        row(&mut out, "  = create -> remote started", &l.total);
        let _ = writeln!(
            out,
            "  p50 {:.1} ms   target < {TARGET_START_P50_MS} ms   {}",
            l.total.p50,
            verdict(self.start_ok())
        );
        let _ = writeln!(out);
        header(&mut out, "destroy, process running (ms)");
        row(&mut out, "  destroy", &l.destroy);
        let _ = writeln!(
            out,
            "  p50 {:.1} ms   target < {TARGET_DESTROY_P50_MS} ms   {}",
            l.destroy.p50,
            verdict(self.destroy_ok())
        );
        let _ = writeln!(out);

        let n = &self.snapshots;
        let _ = writeln!(
            out,
            "snapshot and restore: {} files, {:.1} MB in the workspace (generated inside in {:.1} s), archive {:.1} MB",
            n.files,
            n.workspace_bytes as f64 / 1e6,
            n.fill_secs,
            n.archive_bytes as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "{:<48} {:>10} {:>10} {:>10} {:>10} {:>5}",
            "  (s; MB/s = workspace MB / s)", "p50", "p99", "MB/s p50", "max", "n"
        );
        for (label, summary) in [
            ("  snapshot", &n.snapshot),
            ("  restore (create from the snapshot)", &n.restore),
        ] {
            let _ = writeln!(
                out,
                "{label:<48} {:>10.2} {:>10.2} {:>10.1} {:>10.2} {:>5}",
                summary.p50,
                summary.p99,
                n.mb_per_s(summary.p50),
                summary.max,
                summary.n
            );
        }
        let _ = writeln!(
            out,
            "  restored: {} files, {:.1} MB   {}",
            n.restored_files,
            n.restored_bytes as f64 / 1e6,
            if n.verified() {
                "matches"
            } else {
                "DOES NOT MATCH"
            }
        );
        let _ = writeln!(
            out,
            "  snapshot p50 {:.2} s   target < {TARGET_SNAPSHOT_P50_S} s   {}",
            n.snapshot.p50,
            verdict(self.snapshot_ok())
        );
        let _ = writeln!(
            out,
            "  restore p50 {:.2} s   target < {TARGET_RESTORE_P50_S} s   {}",
            n.restore.p50,
            verdict(self.restore_ok())
        );
        let _ = writeln!(out);

        let m = &self.memory;
        let _ = writeln!(
            out,
            "memory of {} idle sandboxes (remote running), resident",
            m.idle_sandboxes
        );
        header(&mut out, "  helpers outside the sandbox (MiB)");
        for helper in &m.helpers {
            row(&mut out, &format!("    {}", helper.name), &helper.rss_mib);
        }
        if m.helpers.is_empty() {
            let _ = writeln!(out, "    (none)");
        }
        row(&mut out, "  = outside, per sandbox", &m.per_sandbox_mib);
        row(
            &mut out,
            "  inside, per sandbox (its own limit)",
            &m.inside_mib,
        );
        if !m.example.is_empty() {
            let _ = writeln!(out, "  first sandbox's helpers: {}", m.example.join(", "));
        }
        let _ = writeln!(
            out,
            "  largest helper {:.1} MiB   target <= {TARGET_HELPER_RSS_MIB} MiB   {}",
            m.max_helper_mib(),
            verdict(self.helpers_ok())
        );
        if let Some(policy) = &self.policy {
            let _ = writeln!(out);
            policy.table(&mut out);
        }
        if let Some(peer) = &self.peer {
            let _ = writeln!(out);
            peer.table(&mut out, l);
        }
        if let Some(w) = &self.workload {
            let _ = writeln!(out);
            let _ = writeln!(
                out,
                "syscall-heavy workload: a git repository of {} files (made and committed inside in {:.1} s)",
                w.files, w.setup_secs
            );
            header(&mut out, "  git status, timed inside (ms)");
            row(&mut out, "  git status", &w.status_ms);
        }
        out
    }

    /// The same figures as one JSON object.
    pub(super) fn json(&self) -> Value {
        let s = &self.setup;
        let l = &self.lifecycle;
        let n = &self.snapshots;
        let m = &self.memory;
        let helpers: BTreeMap<&str, Value> = m
            .helpers
            .iter()
            .map(|h| (h.name.as_str(), h.rss_mib.json()))
            .collect();
        let mut value = json!({
            "bench": "sandbox",
            "backend": s.backend,
            "runtime": s.runtime,
            "image": s.image,
            "resources": { "cpus": s.cpus, "memory_mb": s.memory_mb, "disk_mb": s.disk_mb },
            "sessions": l.total.n,
            "binary_bytes": s.binary_bytes,
            "create_to_started_ms": l.total.json(),
            "breakdown_ms": {
                "create": l.create.json(),
                "put_binary": l.put.json(),
                "spawn": l.spawn.json(),
                "spawn_to_first_output": l.first_output.json(),
            },
            "destroy_ms": l.destroy.json(),
            "snapshot": {
                "files": n.files,
                "workspace_bytes": n.workspace_bytes,
                "archive_bytes": n.archive_bytes,
                "fill_secs": round(n.fill_secs),
                "snapshot_secs": n.snapshot.json(),
                "snapshot_mb_per_s_p50": round(n.mb_per_s(n.snapshot.p50)),
                "restore_secs": n.restore.json(),
                "restore_mb_per_s_p50": round(n.mb_per_s(n.restore.p50)),
                "restored_files": n.restored_files,
                "restored_bytes": n.restored_bytes,
                "verified": n.verified(),
            },
            "memory": {
                "idle_sandboxes": m.idle_sandboxes,
                "helper_rss_mib": helpers,
                "outside_per_sandbox_mib": m.per_sandbox_mib.json(),
                "inside_per_sandbox_mib": m.inside_mib.json(),
                "example_helpers": m.example,
            },
            "targets": {
                "create_to_started_p50_ms": { "target": TARGET_START_P50_MS, "value": round(l.total.p50), "pass": self.start_ok() },
                "destroy_p50_ms": { "target": TARGET_DESTROY_P50_MS, "value": round(l.destroy.p50), "pass": self.destroy_ok() },
                "snapshot_p50_s": { "target": TARGET_SNAPSHOT_P50_S, "value": round(n.snapshot.p50), "pass": self.snapshot_ok() },
                "restore_p50_s": { "target": TARGET_RESTORE_P50_S, "value": round(n.restore.p50), "pass": self.restore_ok() },
                "max_helper_rss_mib": { "target": TARGET_HELPER_RSS_MIB, "value": round(m.max_helper_mib()), "pass": self.helpers_ok() },
            },
        });
        if let Some(policy) = &self.policy {
            value["policy"] = policy.json();
            value["targets"]["policy_throughput_ratio"] = policy.target_json();
        }
        if let Some(peer) = &self.peer {
            value["peer"] = peer.json(l);
        }
        if let Some(w) = &self.workload {
            value["workload"] = json!({
                "files": w.files,
                "setup_secs": round(w.setup_secs),
                "git_status_ms": w.status_ms.json(),
            });
        }
        value
    }
}
