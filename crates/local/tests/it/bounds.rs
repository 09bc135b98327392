//! What a session can make the host spend, from inside a real local
//! sandbox: a snapshot shaped so that its restore costs the host (a tree
//! deeper than `PATH_MAX` holding one file with thousands of hard links,
//! whose every member `tar` refused with a message naming it), swap beyond
//! the memory limit, and set-user-id files in its layer.
//!
//! Root and the test image are needed (see `support`).

use crate::support::*;
use sandbox::{ProcessStatus, Sandbox};

/// Hard links made to one file at the bottom of the deep tree. The issue's
/// attack used 10,000; fewer keep the test quick, while tar's messages for
/// them (about 15 KB each) still came to tens of megabytes.
const LINKS: u32 = 2_000;

/// Bytes of error text a failed restore may hand on: a few KiB.
const ERROR_BOUND: usize = 8 << 10;

async fn a_tree_deeper_than_path_max_restores_or_fails_once_bounded(runtime: Runtime) {
    let Some(config) = config_for(runtime) else {
        return;
    };
    let backend = std::sync::Arc::new(local::LocalBackend::new(config).unwrap());
    let s = sandbox_in(&backend, "local-deep", sized(1.0, 512, 512), None).await;
    let script = format!(
        "perl -e 'my $n=\"q\"x250; for(1..30){{mkdir $n or die; chdir $n or die}} \
         open(F,\">f\"); close F; my $p=\"L\"x190; \
         link(\"f\", sprintf(\"%s%08d\",$p,$_)) or die for 1..{LINKS}; print \"made\\n\"'"
    );
    let (status, out) = sh(&s, &script).await;
    assert_eq!(
        (status, out.trim()),
        (ProcessStatus::Exited(0), "made"),
        "the tree was made"
    );
    let snapshot = backend.snapshot(&s.handle).await.unwrap();
    backend.destroy(&s.handle).await.unwrap();

    match backend
        .create(&spec(
            "local-deep",
            sized(1.0, 512, 512),
            Some(snapshot.clone()),
        ))
        .await
    {
        Ok(handle) => {
            let restored = Sized {
                backend: backend.clone(),
                handle,
            };
            let (status, out) = sh(
                &restored,
                "perl -e 'my $n=\"q\"x250; for(1..30){chdir $n or die} \
                 print((stat \"f\")[3], \"\\n\")'",
            )
            .await;
            assert_eq!(
                (status, out.trim()),
                (ProcessStatus::Exited(0), (LINKS + 1).to_string().as_str()),
                "the tree is intact"
            );
            backend.destroy(&restored.handle).await.unwrap();
            eprintln!("restored intact");
        }
        Err(e) => {
            let text = e.to_string();
            eprintln!(
                "refused ({} bytes): {}",
                text.len(),
                &text[..text.len().min(300)]
            );
            assert!(
                e.is_unrestorable(),
                "a restore no attempt can mend says so: {}",
                &text[..text.len().min(500)]
            );
            assert!(
                text.len() <= ERROR_BOUND,
                "{} bytes of error text kept",
                text.len()
            );
            assert!(text.contains("PATH_MAX"), "{text}");
            // Nothing of the failed create is left, and the snapshot is.
            assert!(backend.list().await.unwrap().is_empty());
            assert!(backend.snapshot_exists(&snapshot).await.unwrap());
        }
    }
    backend.delete_snapshot(&snapshot).await.unwrap();
}

/// The sandbox's cgroup as the host sees it, for runc and runsc alike.
fn cgroup_file(name: &str, v1: &str, v2: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/fs/cgroup/memory/garrison/{name}/{v1}"))
        .or_else(|_| std::fs::read_to_string(format!("/sys/fs/cgroup/garrison/{name}/{v2}")))
        .ok()
}

async fn memory_and_swap_together_stay_within_the_memory_limit(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    if !local::oci::swap_limit_supported() {
        eprintln!("skipped: this kernel accounts no swap");
        s.backend.destroy(&s.handle).await.unwrap();
        return;
    }
    let name = &s.handle.name;
    let limit = cgroup_file(name, "memory.limit_in_bytes", "memory.max").expect("a memory cgroup");
    let swap = cgroup_file(name, "memory.memsw.limit_in_bytes", "memory.swap.max");
    s.backend.destroy(&s.handle).await.unwrap();
    assert_eq!(limit.trim(), (256u64 << 20).to_string());
    let swap = swap.expect("a swap limit");
    if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        assert_eq!(swap.trim(), "0", "no swap on cgroup v2");
    } else {
        assert_eq!(
            swap.trim(),
            limit.trim(),
            "memory and swap within the limit"
        );
    }
}

async fn the_root_is_mounted_nosuid_and_nodev(runtime: Runtime) {
    let Some(s) = sandbox_on(runtime, sized(1.0, 256, 256)).await else {
        return;
    };
    // The root's options, as the sandbox's own mount table shows them, and
    // whether a set-user-id copy of `id` run as another user gains root.
    let (status, out) = sh(
        &s,
        "awk '$5 == \"/\" { print $6 }' /proc/self/mountinfo | tail -1; \
         cp /usr/bin/id /usr/local/bin/suid-id && chmod 4755 /usr/local/bin/suid-id && \
         setpriv --reuid=1000 --regid=1000 --clear-groups /usr/local/bin/suid-id -u",
    )
    .await;
    s.backend.destroy(&s.handle).await.unwrap();
    assert_eq!(status, ProcessStatus::Exited(0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.get(1).copied(), Some("1000"), "no root gained: {out}");
    if runtime == Runtime::Runc {
        let options: Vec<&str> = lines[0].split(',').collect();
        assert!(
            options.contains(&"nosuid") && options.contains(&"nodev"),
            "the root's options: {}",
            lines[0]
        );
    }
}

under_both_runtimes!(
    a_tree_deeper_than_path_max_restores_or_fails_once_bounded,
    memory_and_swap_together_stay_within_the_memory_limit,
    the_root_is_mounted_nosuid_and_nodev,
);
