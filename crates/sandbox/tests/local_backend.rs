//! The conformance suite and the local-only checks against the `local`
//! backend: real runc containers on overlayfs (root and the test image
//! needed; see `local_support`).

mod local_support;

use std::sync::Arc;

use local_support::*;
use sandbox::conformance::Harness;
use sandbox::local::LocalBackend;
use sandbox::{ProcessSpec, ProcessStatus, Sandbox};

fn harness() -> Option<Harness> {
    let config = config()?;
    let reopen = config.clone();
    Some(Harness {
        backend: Arc::new(LocalBackend::new(config).unwrap()),
        reopen: Box::new(move || Arc::new(LocalBackend::new(reopen.clone()).unwrap())),
        image: None,
        finds_snapshots_by_name: true,
    })
}

/// Inside a module so the tests keep their `conformance::` names, apart
/// from the local-only checks.
mod conformance {
    use super::harness;

    sandbox::conformance_tests!(optional: harness());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_past_the_disk_limit_fails_inside_the_sandbox() {
    let Some(s) = sandbox_with(sized(1.0, 512, 256)).await else {
        return;
    };
    let (status, out) = sh(
        &s,
        "dd if=/dev/zero of=/workspace/big bs=1M count=400 2>&1; echo rc=$?",
    )
    .await;
    assert_eq!(status, ProcessStatus::Exited(0));
    assert!(out.contains("No space left on device"), "{out}");
    assert!(!out.contains("rc=0"), "{out}");
    s.backend.destroy(&s.handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_beyond_the_limit_is_refused() {
    let Some(s) = sandbox_with(sized(1.0, 64, 256)).await else {
        return;
    };
    // tail -c N keeps N bytes of a pipe in memory: 120 MB cannot fit in 64.
    let (_, out) = sh(
        &s,
        "head -c 150000000 /dev/zero | tail -c 120000000 > /dev/null; echo rc=$?",
    )
    .await;
    assert!(out.contains("rc=") && !out.contains("rc=0"), "{out}");
    let (_, small) = sh(
        &s,
        "head -c 15000000 /dev/zero | tail -c 12000000 > /dev/null; echo rc=$?",
    )
    .await;
    assert!(small.contains("rc=0"), "within the limit it works: {small}");
    s.backend.destroy(&s.handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pids_limit_stops_a_fork_bomb() {
    let Some(s) = sandbox_with(sized(1.0, 1024, 256)).await else {
        return;
    };
    let limit = sandbox::local::oci::PIDS_LIMIT;
    let (_, out) = sh(
        &s,
        &format!(
            "i=0; while [ $i -lt {} ]; do sleep 30 & i=$((i+1)); done 2>&1 | tail -1; echo started",
            limit + 100
        ),
    )
    .await;
    assert!(
        out.contains("fork") || out.contains("Resource temporarily unavailable"),
        "{out}"
    );
    s.backend.destroy(&s.handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_quota_is_applied() {
    let Some(s) = sandbox_with(sized(0.5, 256, 256)).await else {
        return;
    };
    let (_, out) = sh(
        &s,
        "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max 2>/dev/null; true",
    )
    .await;
    assert!(out.contains("50000"), "{out}");
    s.backend.destroy(&s.handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_root_without_dangerous_capabilities() {
    let Some(s) = sandbox_with(sized(1.0, 256, 256)).await else {
        return;
    };
    let (_, out) = sh(&s, "id -u; grep CapEff /proc/self/status; ip link add dummy0 type dummy 2>&1 || echo no-net-admin").await;
    assert!(out.starts_with("0\n"), "{out}");
    let cap_eff = out.lines().find(|l| l.starts_with("CapEff")).unwrap();
    let mask = u64::from_str_radix(cap_eff.split_whitespace().nth(1).unwrap(), 16).unwrap();
    const CAP_NET_ADMIN: u64 = 1 << 12;
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_NET_RAW: u64 = 1 << 13;
    assert_eq!(
        mask & (CAP_NET_ADMIN | CAP_SYS_ADMIN | CAP_NET_RAW),
        0,
        "{out}"
    );
    s.backend.destroy(&s.handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_leaves_no_mount_cgroup_process_link_or_directory() {
    let Some(s) = sandbox_with(sized(1.0, 256, 256)).await else {
        return;
    };
    let name = s.handle.name.clone();
    let spec = ProcessSpec {
        name: "sleeper".into(),
        argv: vec!["/bin/sleep".into(), "1000".into()],
        env: Default::default(),
        cwd: "/workspace".into(),
    };
    s.backend.spawn(&s.handle, &spec).await.unwrap();
    let link = s.backend.host_link(&name).unwrap();
    assert!(std::path::Path::new("/sys/class/net").join(&link).exists());
    let pids = sandbox_pids(&name);
    assert!(pids.len() >= 3, "init, shim and sleeper: {pids:?}");
    s.backend.destroy(&s.handle).await.unwrap();
    // Not even a zombie: Garrison reaps what runc left it before destroy
    // returns, instead of leaving that to the machine's init.
    let left: Vec<_> = pids
        .iter()
        .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    assert!(left.is_empty(), "processes left: {left:?}");
    assert!(
        !std::path::Path::new("/sys/class/net").join(&link).exists(),
        "the host link {link} is left"
    );

    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&name), "a mount is left");
    for controller in ["memory/", "pids/", "cpu/", ""] {
        let path = format!("/sys/fs/cgroup/{controller}garrison/{name}");
        assert!(!std::path::Path::new(&path).exists(), "{path} is left");
    }
    let processes = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    let processes = String::from_utf8_lossy(&processes.stdout);
    assert!(
        !processes.lines().any(|l| l.contains(&name)),
        "a process is left: {processes}"
    );
    assert!(s.backend.list().await.unwrap().is_empty());
    let netns = std::fs::read_dir("/run/netns")
        .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>());
    assert!(
        !format!("{netns:?}").contains(&name),
        "a network namespace is left: {netns:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_keeps_deletions_of_image_files_opaque_dirs_and_git_history() {
    let Some(s) = sandbox_with(sized(1.0, 512, 512)).await else {
        return;
    };
    let (status, out) = sh(
        &s,
        "set -e; rm /etc/debian_version; rm -rf /usr/share/doc && mkdir /usr/share/doc && echo mine > /usr/share/doc/only; \
         cd /workspace && git init -q repo && cd repo && git config user.email t@t && git config user.name t \
         && echo a > a && git add a && git commit -qm one && echo b > b && git add b && git commit -qm two && echo ok",
    )
    .await;
    assert_eq!(status, ProcessStatus::Exited(0), "{out}");
    let snapshot = s.backend.snapshot(&s.handle).await.unwrap();
    s.backend.destroy(&s.handle).await.unwrap();

    let spec = spec("local-restore", sized(1.0, 512, 512), Some(snapshot));
    let handle = s.backend.create(&spec).await.unwrap();
    let restored = Sized {
        backend: s.backend,
        handle,
    };
    let (status, out) = sh(
        &restored,
        "test ! -e /etc/debian_version && echo whiteout-kept; ls /usr/share/doc; \
         cd /workspace/repo && git fsck --full 2>&1 && git log --format=%s",
    )
    .await;
    assert_eq!(status, ProcessStatus::Exited(0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, ["whiteout-kept", "only", "two", "one"], "{out}");
    restored.backend.destroy(&restored.handle).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remains_of_an_interrupted_create_are_cleaned_by_the_next_one() {
    let Some(config) = config() else { return };
    let backend = LocalBackend::new(config.clone()).unwrap();
    let spec = spec("local-crash", sized(1.0, 256, 256), None);
    // What a crash between the disk mount and the handle leaves behind.
    let dir = config.root.join("sandboxes").join(spec.name.as_str());
    std::fs::create_dir_all(dir.join("disk")).unwrap();
    std::fs::write(dir.join("config.json"), "{}").unwrap();
    assert!(
        backend.list().await.unwrap().is_empty(),
        "no handle, not a sandbox"
    );
    let handle = backend.create(&spec).await.unwrap();
    assert_eq!(backend.list().await.unwrap().len(), 1);
    backend.destroy(&handle).await.unwrap();
}

/// Garrison killed between `runc exec` starting the shim and recording it:
/// a fresh backend must still see the process as running (and able to stop
/// it), or a re-adopting Garrison would start a second remote beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_whose_start_was_not_recorded_still_reads_as_running() {
    let Some(config) = config() else {
        return;
    };
    let root = config.root.clone();
    let backend = Arc::new(LocalBackend::new(config.clone()).unwrap());
    let handle = backend
        .create(&spec("local-unrecorded", sized(1.0, 256, 256), None))
        .await
        .unwrap();
    let spec = ProcessSpec {
        name: "remote-unrecorded".into(),
        argv: vec!["/bin/sleep".into(), "300".into()],
        env: Default::default(),
        cwd: handle.workdir.clone(),
    };
    let process = backend.spawn(&handle, &spec).await.unwrap();
    let record = root
        .join("sandboxes")
        .join(&handle.name)
        .join("proc")
        .join(&process.id)
        .join("shim.pid");
    std::fs::remove_file(&record).expect("the shim's record exists");

    let reopened = LocalBackend::new(config).unwrap();
    assert_eq!(
        reopened.status(&handle, &process).await.unwrap(),
        ProcessStatus::Running
    );
    reopened
        .kill(&handle, &process, std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let stopped = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        sandbox::wait_exit(
            &reopened,
            &handle,
            &process,
            std::time::Duration::from_millis(25),
        ),
    )
    .await
    .expect("the process stops")
    .unwrap();
    assert_ne!(stopped, ProcessStatus::Running);
    backend.destroy(&handle).await.unwrap();
}

/// The host pids in sandbox `name`'s cgroup (cgroup v1 or v2).
fn sandbox_pids(name: &str) -> Vec<u32> {
    ["/sys/fs/cgroup/pids/garrison", "/sys/fs/cgroup/garrison"]
        .iter()
        .find_map(|base| std::fs::read_to_string(format!("{base}/{name}/cgroup.procs")).ok())
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}
