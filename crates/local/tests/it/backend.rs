//! The conformance suite and the local-only checks against the `local`
//! backend: real containers on overlayfs, each test under runc and under
//! runsc (root and the test image needed; see `support`).

use std::sync::Arc;

use crate::support::*;
use local::LocalBackend;
use sandbox::conformance::Harness;
use sandbox::{ProcessSpec, ProcessStatus, Sandbox};

fn harness(runtime: Runtime) -> Option<Harness> {
    let config = config_for(runtime)?;
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
    use super::{Runtime, harness};

    sandbox::conformance_tests!(optional: harness(Runtime::Runc));
}

/// The same suite on gVisor.
mod conformance_runsc {
    use super::{Runtime, harness};

    sandbox::conformance_tests!(optional: harness(Runtime::Runsc));
}

async fn writing_past_the_disk_limit_fails_inside_the_sandbox(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 512, 256)).await else {
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

async fn memory_beyond_the_limit_is_refused(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 64, 256)).await else {
        return;
    };
    let (_, small) = sh(
        &s,
        "head -c 15000000 /dev/zero | tail -c 12000000 > /dev/null; echo rc=$?",
    )
    .await;
    assert!(small.contains("rc=0"), "within the limit it works: {small}");
    // tail -c N keeps N bytes of a pipe in memory: 120 MB cannot fit in 64.
    let (_, out) = sh(
        &s,
        "head -c 150000000 /dev/zero | tail -c 120000000 > /dev/null; echo rc=$?",
    )
    .await;
    match runtime {
        Runtime::Runc => assert!(out.contains("rc=") && !out.contains("rc=0"), "{out}"),
        // gVisor's kernel is in the container's memory cgroup with the
        // session: the host's OOM killer ends the whole sandbox.
        Runtime::Runsc => assert!(!out.contains("rc=0"), "{out}"),
    }
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn the_pids_limit_stops_a_fork_bomb(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 1024, 256)).await else {
        return;
    };
    let limit = local::oci::PIDS_LIMIT;
    if runtime == Runtime::Runsc {
        // gVisor's tasks are not host processes: the host's pids limit is on
        // the Sentry's threads and stub processes, and a bomb reaching it
        // ends the sandbox (below) rather than failing a fork inside.
        assert_eq!(
            host_cgroup_file(&s.handle.name, "pids", "pids.max").as_deref(),
            Some(limit.to_string().as_str())
        );
    }
    let (status, out) = sh(
        &s,
        &format!(
            "i=0; while [ $i -lt {} ]; do sleep 30 & i=$((i+1)); done 2>&1 | tail -1; echo started",
            limit + 100
        ),
    )
    .await;
    let refused = out.contains("fork") || out.contains("Resource temporarily unavailable");
    let sandbox_ended = runtime == Runtime::Runsc && status == ProcessStatus::Lost;
    assert!(refused || sandbox_ended, "{status:?}: {out}");
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn the_cpu_quota_is_applied(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(0.5, 256, 256)).await else {
        return;
    };
    let out =
        match runtime {
            Runtime::Runc => sh(
                &s,
                "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max 2>/dev/null; true",
            )
            .await
            .1,
            // gVisor shows the sandbox no cgroup files; the quota is on the
            // host's cgroup of the whole sandbox (the Sentry included).
            Runtime::Runsc => ["cpu.cfs_quota_us", "cpu.max"]
                .iter()
                .find_map(|file| host_cgroup_file(&s.handle.name, "cpu", file))
                .unwrap_or_default(),
        };
    assert!(out.contains("50000"), "{out}");
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn the_agent_is_root_without_dangerous_capabilities(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    let (_, out) = sh(&s, "id -u; grep CapEff /proc/self/status; ip link add dummy0 type dummy 2>&1 || echo no-net-admin").await;
    assert!(out.starts_with("0\n"), "{out}");
    assert_eq!(dangerous_capabilities(&out), 0, "{out}");
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn destroy_leaves_no_mount_cgroup_process_link_or_directory(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
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
    let described: Vec<String> = left
        .iter()
        .map(|pid| {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            format!(
                "{pid} {} [{}]",
                cmd.replace('\0', " "),
                stat.chars().take(60).collect::<String>()
            )
        })
        .collect();
    assert!(left.is_empty(), "processes left: {described:?}");
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

async fn a_restore_keeps_deletions_of_image_files_opaque_dirs_and_git_history(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 512, 512)).await else {
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

    let restored = sandbox_in(
        &s.backend,
        "local-restore",
        sized(1.0, 512, 512),
        Some(snapshot),
    )
    .await;
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

async fn the_remains_of_an_interrupted_create_are_cleaned_by_the_next_one(runtime: Runtime) {
    let Some(config) = config_for(runtime) else {
        return;
    };
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
    // Killed again, this time after the network and container were up:
    // when no create follows (the session ended elsewhere),
    // `remove_remains` takes all of it down.
    std::fs::remove_file(dir.join("handle.json")).unwrap();
    let link = backend.host_link(&handle.name).unwrap();
    assert!(backend.remove_remains(&spec.name).await.unwrap());
    assert!(!dir.exists(), "the remains' directory is left");
    assert!(
        !std::path::Path::new("/sys/class/net").join(&link).exists(),
        "the remains' network link {link} is left"
    );
    assert!(!backend.remove_remains(&spec.name).await.unwrap());
    backend.destroy(&handle).await.unwrap();
}

/// Garrison killed between `runc exec` starting the shim and recording it:
/// a fresh backend must still see the process as running (and able to stop
/// it), or a re-adopting Garrison would start a second remote beside it.
async fn a_process_whose_start_was_not_recorded_still_reads_as_running(runtime: Runtime) {
    let Some(config) = config_for(runtime) else {
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

/// `file` of sandbox `name`'s cgroup on the host (cgroup v1 `controller`,
/// or v2).
fn host_cgroup_file(name: &str, controller: &str, file: &str) -> Option<String> {
    [
        format!("/sys/fs/cgroup/{controller}/garrison/{name}/{file}"),
        format!("/sys/fs/cgroup/garrison/{name}/{file}"),
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .map(|text| text.trim().to_owned())
}

under_both_runtimes!(
    writing_past_the_disk_limit_fails_inside_the_sandbox,
    memory_beyond_the_limit_is_refused,
    the_pids_limit_stops_a_fork_bomb,
    the_cpu_quota_is_applied,
    the_agent_is_root_without_dangerous_capabilities,
    destroy_leaves_no_mount_cgroup_process_link_or_directory,
    a_restore_keeps_deletions_of_image_files_opaque_dirs_and_git_history,
    the_remains_of_an_interrupted_create_are_cleaned_by_the_next_one,
    a_process_whose_start_was_not_recorded_still_reads_as_running,
);
