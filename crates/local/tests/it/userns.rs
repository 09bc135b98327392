//! The container's root is an unprivileged uid on the host: each sandbox
//! runs in a user namespace of its own (`SANDBOX_USERNS`, on by default),
//! and what it stores is unshifted, so snapshots move between sandboxes
//! with and without one.
//!
//! Root and the test image are needed (see `support`).

use crate::support::*;
use local::LocalBackend;
use local::userns::{FIRST_HOST_ID, IDS};
use sandbox::{ProcessStatus, Sandbox};

/// The `/proc/<pid>/status` of every host process in sandbox `name`'s
/// cgroup, as the host sees them.
fn host_view_of_processes(name: &str) -> Vec<String> {
    let wanted = format!("/garrison/{name}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("cgroup"))
                .is_ok_and(|c| c.lines().any(|l| l.ends_with(&wanted)))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .collect()
}

/// The host base of the sandbox's id map, from inside.
async fn host_base(s: &Sized) -> u32 {
    let (status, map) = sh(s, "cat /proc/self/uid_map").await;
    assert_eq!(status, ProcessStatus::Exited(0), "{map}");
    let fields: Vec<u64> = map.split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(fields.len(), 3, "one range only: {map}");
    assert_eq!((fields[0], fields[2]), (0, u64::from(IDS)), "{map}");
    u32::try_from(fields[1]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_containers_root_is_an_unprivileged_host_uid_of_its_own() {
    let Some(a) = sandbox_with(sized(1.0, 256, 256)).await else {
        return;
    };
    let b = sandbox_in(&a.backend, "local-userns", sized(1.0, 256, 256), None).await;
    let (base_a, base_b) = (host_base(&a).await, host_base(&b).await);
    assert!(base_a >= FIRST_HOST_ID, "{base_a}");
    assert!(
        base_a.abs_diff(base_b) >= IDS,
        "two sandboxes share ids: {base_a} {base_b}"
    );

    // Root inside, with its capabilities over what it owns...
    let (status, out) = sh(
        &a,
        "id -u && touch /workspace/f && chown 1000:1000 /workspace/f && stat -c '%u %g' /workspace/f \
         && apt-get --version >/dev/null 2>&1; ls -ln / | grep -c ' 0 *0 '",
    )
    .await;
    assert_eq!(status, ProcessStatus::Exited(0), "{out}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("0"));
    assert_eq!(lines.next(), Some("1000 1000"));
    // The image's files are root's in the container's eyes.
    assert!(
        lines.next().unwrap().parse::<u32>().unwrap() > 5,
        "the image is not owned by the container's root: {out}"
    );

    // ...but not root on the host: every process the host sees in the
    // sandbox, its init included, runs as an id of the sandbox's range.
    let seen = host_view_of_processes(&a.handle.name);
    assert!(!seen.is_empty());
    for status in &seen {
        let uids: Vec<u32> = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .unwrap()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert!(
            uids.iter().all(|u| (base_a..base_a + IDS).contains(u)),
            "a sandbox process runs as host uid {uids:?}"
        );
    }

    // The kernel let it mount its own sysfs: the network namespace is the
    // user namespace's, and shows only the sandbox's own links.
    let (_, links) = sh(&a, "ls /sys/class/net").await;
    let links: Vec<&str> = links.split_whitespace().collect();
    assert!(links.contains(&"lo"), "{links:?}");
    assert!(
        links.iter().all(|l| !l.starts_with("gv")),
        "the host's links show: {links:?}"
    );
    for s in [a, b] {
        s.backend.destroy(&s.handle).await.unwrap();
    }
}

/// `uid:gid path` of the files the snapshot test made, as the sandbox sees
/// them.
async fn owners_of_the_files(s: &Sized) -> String {
    let (_, owners) = sh(
        s,
        "stat -c '%u:%g %n' /workspace/d /workspace/d/user /workspace/rootfile",
    )
    .await;
    owners
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_keeps_ownership_with_and_without_a_user_namespace() {
    let Some(config) = config() else {
        return;
    };
    let with = std::sync::Arc::new(LocalBackend::new(config.clone()).unwrap());
    let without = std::sync::Arc::new(
        LocalBackend::new(local::LocalConfig {
            userns: false,
            root: config.root.with_file_name("local-no-userns"),
            ..config
        })
        .unwrap(),
    );
    let first = sandbox_in(&with, "local-userns", sized(1.0, 256, 256), None).await;
    let (status, out) = sh(
        &first,
        "mkdir -p /workspace/d && echo x > /workspace/d/user && chown -R 1000:1001 /workspace/d \
         && echo y > /workspace/rootfile && echo ok",
    )
    .await;
    assert_eq!((status, out.trim()), (ProcessStatus::Exited(0), "ok"));
    let snapshot = with.snapshot(&first.handle).await.unwrap();
    with.destroy(&first.handle).await.unwrap();

    // Restored where the container's root is host root: what the user
    // namespace stored was never shifted.
    let plain = sandbox_in(
        &without,
        "local-plain",
        sized(1.0, 256, 256),
        Some(snapshot),
    )
    .await;
    let (_, map) = sh(&plain, "cat /proc/self/uid_map").await;
    assert_eq!(
        map.split_whitespace().collect::<Vec<_>>(),
        ["0", "0", "4294967295"]
    );
    let owners = owners_of_the_files(&plain).await;
    assert_eq!(
        owners.lines().collect::<Vec<_>>(),
        [
            "1000:1001 /workspace/d",
            "1000:1001 /workspace/d/user",
            "0:0 /workspace/rootfile"
        ]
    );
    // And back into a user namespace: the same ownership again.
    let snapshot = without.snapshot(&plain.handle).await.unwrap();
    without.destroy(&plain.handle).await.unwrap();
    let again = sandbox_in(&with, "local-userns", sized(1.0, 256, 256), Some(snapshot)).await;
    let owners_again = owners_of_the_files(&again).await;
    assert_eq!(owners_again, owners);
    with.destroy(&again.handle).await.unwrap();
}
