//! Attacks from inside a real local sandbox on the host's side of it. The
//! session's code is root in its container and can replace any file the
//! host later reads; each test plants one trap and checks that the host
//! reads nothing it should not and never blocks.
//!
//! Root and the test image are needed (see `support`).

use std::time::Duration;

use crate::support::*;
use sandbox::{ProcessRef, ProcessSpec, ProcessStatus, Sandbox};

/// Stops a test whose host-side read blocked (the attack worked) instead of
/// hanging the suite.
const HUNG: Duration = Duration::from_secs(60);

/// A finished process whose files the attacker then tampers with.
async fn victim(s: &Sized) -> ProcessRef {
    let spec = ProcessSpec {
        name: format!("victim-{:08x}", rand::random::<u32>()),
        argv: vec!["/bin/sh".into(), "-c".into(), "echo hello".into()],
        env: Default::default(),
        cwd: s.handle.workdir.clone(),
    };
    let process = s.backend.spawn(&s.handle, &spec).await.unwrap();
    let status = tokio::time::timeout(
        HUNG,
        sandbox::wait_exit(
            s.backend.as_ref(),
            &s.handle,
            &process,
            Duration::from_millis(25),
        ),
    )
    .await
    .expect("the victim finishes")
    .unwrap();
    assert_eq!(status, ProcessStatus::Exited(0));
    process
}

/// Runs `script` in the sandbox with `$P` set to the victim's directory as
/// the container sees it.
async fn tamper(s: &Sized, victim: &ProcessRef, script: &str) {
    let dir = format!("{}/{}", local::oci::PROC_DIR, victim.id);
    let (status, out) = sh(s, &format!("P={dir}; set -e; {script}")).await;
    assert_eq!(status, ProcessStatus::Exited(0), "the trap was set: {out}");
}

/// The host reads the victim's output with a hang guard; returns the bytes.
async fn host_reads_output(s: &Sized, process: &ProcessRef) -> Vec<u8> {
    let backend = s.backend.clone();
    let handle = s.handle.clone();
    let process = process.clone();
    // On its own task, so that a blocking open stalls that worker only and
    // the timeout still fires.
    let read =
        tokio::spawn(async move { backend.read_output(&handle, &process, 0, 1 << 20).await });
    tokio::time::timeout(HUNG, read)
        .await
        .expect("reading the output does not block")
        .unwrap()
        .unwrap()
        .data
}

async fn a_fifo_in_place_of_the_output_log_neither_blocks_nor_is_read(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    let p = victim(&s).await;
    tamper(&s, &p, "rm $P/output.log; mkfifo $P/output.log").await;
    assert!(host_reads_output(&s, &p).await.is_empty());
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn a_fifo_in_place_of_the_exit_file_does_not_block_the_status(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    let p = victim(&s).await;
    tamper(&s, &p, "rm $P/exit; mkfifo $P/exit").await;
    let backend = s.backend.clone();
    let (handle, process) = (s.handle.clone(), p.clone());
    let status = tokio::spawn(async move { backend.status(&handle, &process).await });
    let status = tokio::time::timeout(HUNG, status)
        .await
        .expect("the status does not block")
        .unwrap();
    // Whatever it says, it is not the code the FIFO would never deliver.
    assert!(
        !matches!(status, Ok(ProcessStatus::Exited(0))),
        "{status:?}"
    );
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn no_device_node_is_made_and_no_symlink_is_followed_by_the_host(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    // A device node in the root would be a host device to a host-side
    // read (/dev/zero: endless bytes; a disk: its contents). The devices
    // cgroup refuses mknod (gVisor refuses it on the root filesystem too),
    // and the root is mounted nodev besides. (/workspace, not /tmp: under
    // runsc, /tmp is a tmpfs in gVisor's memory, not the root.)
    let (_, out) = sh(&s, "mknod /workspace/zero c 1 5 2>&1 && echo made").await;
    assert!(!out.contains("made"), "{out}");
    let traps = [
        "rm $P/output.log; ln -s /dev/zero $P/output.log",
        "rm $P/output.log; ln -s /etc/shadow $P/output.log",
        "rm $P/output.log; ln -s /proc/self/environ $P/output.log",
        "rm $P/output.log; mkdir $P/output.log",
    ];
    for trap in traps {
        let p = victim(&s).await;
        tamper(&s, &p, trap).await;
        let read = host_reads_output(&s, &p).await;
        assert!(
            read.is_empty(),
            "{trap}: the host read {} bytes",
            read.len()
        );
    }
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn a_sparse_terabyte_output_log_is_read_a_bounded_chunk_at_a_time(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    let p = victim(&s).await;
    // Costs the sandbox no disk at all.
    tamper(&s, &p, "truncate -s 1T $P/output.log").await;
    let read = host_reads_output(&s, &p).await;
    assert!(read.len() <= 1 << 20, "{}", read.len());
    // (What the host copies of it in all is capped per session by the
    // orchestrator: session_log_max_mb.)
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn no_user_namespace_no_new_privileges_and_the_escape_syscalls_refused(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    if runtime == Runtime::Runsc {
        return under_gvisor_no_system_call_reaches_the_host_unfiltered(&s).await;
    }
    let (_, status) = sh(&s, "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status").await;
    assert!(status.contains("Seccomp:\t2"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    // A user namespace would make the agent root with CAP_SYS_ADMIN again.
    for attempt in ["unshare -U true", "unshare -r id", "unshare -m true"] {
        let (_, out) = sh(&s, &format!("{attempt} 2>&1 && echo ESCAPED")).await;
        assert!(!out.contains("ESCAPED"), "{attempt}: {out}");
    }
    // perl (Debian's perl-base, in every image) makes raw syscalls: keyctl
    // would reach root's keyring, shared with the host; io_uring and bpf
    // are the usual kernel bugs' way in.
    #[cfg(target_arch = "x86_64")]
    {
        let probes = [
            ("keyctl", "250, 0, -3, 0"),
            ("io_uring_setup", "425, 1, 0"),
            ("bpf", "321, 0, 0, 0"),
            ("add_key", "248, 0, 0, 0, 0, 0"),
        ];
        for (name, args) in probes {
            let (_, out) = sh(
                &s,
                &format!("perl -e '$r = syscall({args}); print \"$r \", $!+0, \"\\n\"'"),
            )
            .await;
            assert_eq!(out.trim(), "-1 1", "{name} was not refused with EPERM");
        }
    }
    s.backend.destroy(&s.handle).await.unwrap();
}

/// runsc's counterpart of the checks above. The agent's system calls are
/// served by gVisor's kernel (the Sentry), not the host's: a user
/// namespace, keyrings or io_uring there are gVisor's own, and what the
/// Sentry itself may ask of the host is bounded by its seccomp filter.
/// So: every host process of the sandbox runs under a seccomp filter and
/// no_new_privs, without the capabilities that would reach the network
/// rules or mounts, and inside, the kernel is gVisor's.
async fn under_gvisor_no_system_call_reaches_the_host_unfiltered(s: &Sized) {
    let pids = sandbox_pids(&s.handle.name);
    assert!(!pids.is_empty(), "the sandbox has host processes");
    for pid in pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        if status.is_empty() {
            continue; // ended meanwhile
        }
        assert!(status.contains("Seccomp:\t2"), "{pid}: {status}");
        assert!(status.contains("NoNewPrivs:\t1"), "{pid}: {status}");
        // Not even a compromised Sentry could rewrite the namespace's
        // rules (NET_ADMIN), bypass them (NET_RAW) or mount (SYS_ADMIN).
        assert_eq!(dangerous_capabilities(&status), 0, "{pid}: {status}");
    }
    // gVisor reports its own kernel version, not the host's.
    let (_, release) = sh(s, "uname -r").await;
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(release.trim(), host.trim(), "the host's kernel answered");
    // Keyrings (the host's root keyring) and bpf are refused by gVisor.
    #[cfg(target_arch = "x86_64")]
    for (name, args) in [
        ("keyctl", "250, 0, -3, 0"),
        ("bpf", "321, 0, 0, 0"),
        ("add_key", "248, 0, 0, 0, 0, 0"),
    ] {
        let (_, out) = sh(
            s,
            &format!("perl -e '$r = syscall({args}); print \"$r \", $!+0, \"\\n\"'"),
        )
        .await;
        let out = out.trim();
        assert!(
            out.starts_with("-1 ") && out != "-1 0",
            "{name} was not refused: {out}"
        );
    }
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn the_host_cgroup_tree_and_energy_counters_are_hidden(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    let (_, cgroup) = sh(&s, "cat /proc/self/cgroup").await;
    // One line per hierarchy (v1, v2 or both, as the host has them), each
    // the namespace's root rather than /garrison/<name> on the host.
    assert!(
        cgroup.lines().all(|line| line.ends_with(":/")),
        "the host's cgroup path shows: {cgroup}"
    );
    let (_, powercap) = sh(
        &s,
        "ls -A /sys/devices/virtual/powercap 2>/dev/null | wc -l; cat /sys/devices/virtual/powercap/*/energy_uj 2>&1 | head -c 200",
    )
    .await;
    assert!(powercap.starts_with("0\n"), "{powercap}");
    s.backend.destroy(&s.handle).await.unwrap();
}

async fn a_sparse_terabyte_in_the_workspace_is_snapshotted_as_sparse(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    // Free for the sandbox; without sparse packing the host would read and
    // compress a terabyte of zeros.
    let (status, out) = sh(
        &s,
        "truncate -s 1T /workspace/huge && printf tail >> /workspace/huge && echo ok",
    )
    .await;
    assert_eq!((status, out.trim()), (ProcessStatus::Exited(0), "ok"));
    let snapshot = s.backend.snapshot(&s.handle).await.unwrap();
    assert!(snapshot.size_bytes < 1 << 20, "{snapshot:?}");
    s.backend.destroy(&s.handle).await.unwrap();

    let again = sandbox_in(
        &s.backend,
        "local-sparse",
        sized(1.0, 256, 256),
        Some(snapshot),
    )
    .await;
    let (_, out) = sh(
        &again,
        "stat -c '%s %b' /workspace/huge; tail -c 4 /workspace/huge",
    )
    .await;
    let mut lines = out.lines();
    let sizes: Vec<u64> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(sizes[0], (1 << 40) + 4);
    let blocks = match runtime {
        Runtime::Runc => sizes[1],
        // gVisor reports a file's blocks from its size; the host's layer
        // holds what is really stored.
        Runtime::Runsc => {
            use std::os::unix::fs::MetadataExt;
            let upper = again.backend.upper_dir(&again.handle.name).unwrap();
            std::fs::metadata(upper.join("workspace/huge"))
                .unwrap()
                .blocks()
        }
    };
    assert!(blocks * 512 < 1 << 20, "{blocks} blocks");
    assert_eq!(lines.next(), Some("tail"));
    again.backend.destroy(&again.handle).await.unwrap();
}

under_both_runtimes!(
    a_fifo_in_place_of_the_output_log_neither_blocks_nor_is_read,
    a_fifo_in_place_of_the_exit_file_does_not_block_the_status,
    no_device_node_is_made_and_no_symlink_is_followed_by_the_host,
    a_sparse_terabyte_output_log_is_read_a_bounded_chunk_at_a_time,
    no_user_namespace_no_new_privileges_and_the_escape_syscalls_refused,
    the_host_cgroup_tree_and_energy_counters_are_hidden,
    a_sparse_terabyte_in_the_workspace_is_snapshotted_as_sparse,
);

/// Under runsc the host signals a session's processes through a program in
/// the sandbox (gVisor's processes have no host pid), and the sandbox can
/// replace that program: one that never returns must not hang a kill, nor
/// the destroy after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replaced_killer_cannot_hang_a_kill_under_runsc() {
    let Some(s) = sandbox_on(Runtime::Runsc, sized(1.0, 256, 256)).await else {
        return;
    };
    let spec = ProcessSpec {
        name: format!("sleeper-{:08x}", rand::random::<u32>()),
        argv: vec!["/bin/sleep".into(), "1000".into()],
        env: Default::default(),
        cwd: s.handle.workdir.clone(),
    };
    let sleeper = s.backend.spawn(&s.handle, &spec).await.unwrap();
    // The last process the shim starts: after this, it is the attacker's.
    let shim = local::oci::SHIM;
    let (status, out) = sh(
        &s,
        &format!(
            "printf '#!/bin/sh\\nexec sleep 100000\\n' > {shim}.new && chmod 755 {shim}.new \
             && mv {shim}.new {shim} && echo replaced"
        ),
    )
    .await;
    assert_eq!((status, out.trim()), (ProcessStatus::Exited(0), "replaced"));
    let kill = s
        .backend
        .kill(&s.handle, &sleeper, Duration::from_millis(100));
    tokio::time::timeout(HUNG, kill)
        .await
        .expect("the kill returns although the killer never does")
        .unwrap();
    tokio::time::timeout(HUNG, s.backend.destroy(&s.handle))
        .await
        .expect("the destroy returns")
        .unwrap();
}
