//! A suspend of a local sandbox keeps its files, not its processes (see
//! `local::memory_suspend_unavailable`). This holds the runsc reason to the
//! fact: runsc refuses to checkpoint a sandbox as Garrison runs it. Should a
//! runsc ever accept, this fails, and memory suspend (issue 29) can be
//! built on its checkpoint and restore.

use std::sync::Arc;

use crate::support::*;
use local::{HOSTINET_REFUSAL, LocalBackend};
use sandbox::{ProcessStatus, Sandbox};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runsc_refuses_to_checkpoint_a_sandbox_on_host_networking() {
    let Some(config) = config_for(Runtime::Runsc) else {
        return;
    };
    let state_root = config.root.join("runsc");
    let backend = Arc::new(LocalBackend::new(config).unwrap());
    let s = sandbox_in(&backend, "checkpoint", sized(1.0, 256, 256), None).await;
    let images = tempfile::tempdir().unwrap();
    // The global flags that decide it, as `Runtime::global_flags` gives them.
    let out = std::process::Command::new(Runtime::Runsc.default_binary())
        .arg("--root")
        .arg(&state_root)
        .args(["--platform=ptrace", "--network=host", "checkpoint"])
        .arg("--image-path")
        .arg(images.path())
        .arg(&s.handle.name)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(HOSTINET_REFUSAL),
        "runsc checkpointed a sandbox on host networking ({}): {stderr}",
        out.status
    );
    // Refused before anything was saved: the sandbox runs on.
    let (status, output) = sh(&s, "echo alive").await;
    assert_eq!(status, ProcessStatus::Exited(0), "{output}");
    assert_eq!(output.trim(), "alive");
    assert_eq!(
        backend.memory_suspend_unavailable().as_deref(),
        Some(local::memory_suspend_unavailable(Runtime::Runsc).as_str())
    );
    backend.destroy(&s.handle).await.unwrap();
}
