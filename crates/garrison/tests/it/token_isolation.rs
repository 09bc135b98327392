//! The account token, `GIT_TOKEN` and the cloud credentials (the Tensorlake
//! API key, the Modal token) never reach a sandbox, on every backend that
//! runs here: while sessions run, every process of each sandbox (its
//! environment and command line) and the sandbox's whole filesystem are
//! scanned for them.

use std::path::{Path, PathBuf};

use crate::common::Backend;
use crate::common::*;
use emulator::Then;

const GIT_TOKEN: &str = "gtok_isolation_check_4f1e9a77c2";

/// Pids of the processes that belong to the sandboxes under `state`.
fn sandbox_pids(state: &Path, backend: Backend) -> Vec<u32> {
    match backend {
        // A host sandbox's processes, and those of the mock Tensorlake and
        // the mock Modal, run with their working directory inside the
        // sandbox's directory.
        Backend::Host | Backend::Tensorlake | Backend::Modal => {
            let root = match backend {
                Backend::Host => state.join("host").join("sandboxes"),
                Backend::Modal => state.join("modal-mock").join("sandboxes"),
                _ => state.parent().unwrap().join("tensorlake-mock/sandboxes"),
            };
            let root = std::fs::canonicalize(&root).unwrap_or(root);
            all_pids()
                .into_iter()
                .filter(|pid| {
                    std::fs::read_link(format!("/proc/{pid}/cwd"))
                        .is_ok_and(|cwd| cwd.starts_with(&root))
                })
                .collect()
        }
        // A container's processes are exactly its cgroup's.
        Backend::Local | Backend::LocalRunsc => {
            let mut pids = Vec::new();
            for sandbox in sandbox_names(state, "local") {
                let procs = format!("/sys/fs/cgroup/pids/garrison/{sandbox}/cgroup.procs");
                let text =
                    std::fs::read_to_string(&procs).unwrap_or_else(|e| panic!("{procs}: {e}"));
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
            pids
        }
    }
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

fn sandbox_names(state: &Path, backend: &str) -> Vec<String> {
    std::fs::read_dir(state.join(backend).join("sandboxes"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The sandboxes' filesystems as the host sees them.
fn sandbox_roots(state: &Path, backend: Backend) -> Vec<PathBuf> {
    let (dir, inner) = match backend {
        Backend::Host => ("host", "fs"),
        Backend::Local | Backend::LocalRunsc => ("local", "rootfs"),
        Backend::Tensorlake => {
            let sandboxes = state.parent().unwrap().join("tensorlake-mock/sandboxes");
            return std::fs::read_dir(sandboxes)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
        }
        Backend::Modal => ("modal-mock", "garrison"),
    };
    sandbox_names(state, dir)
        .into_iter()
        .map(|n| state.join(dir).join("sandboxes").join(n).join(inner))
        .collect()
}

async fn no_token_reaches_a_running_sandbox(backend: Backend) {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start_on_with_env(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
        backend,
        vec![
            ("GIT_TOKEN".to_owned(), GIT_TOKEN.to_owned()),
            ("GIT_USERNAME".to_owned(), "ci".to_owned()),
        ],
    );
    let ids: Vec<String> = (0..2)
        .map(|i| {
            session(
                &emu,
                &outpost,
                vec![write("work.txt", &format!("session {i}")), run("sleep 1")],
                Then::Wait,
            )
        })
        .collect();
    wait_until("both sessions running their steps", Some(&g), || {
        ids.iter().all(|id| view(&emu, id).steps_done == 2)
    })
    .await;

    let account = emu.account_token();
    let mut secrets = vec![
        account.as_bytes(),
        GIT_TOKEN.as_bytes(),
        TENSORLAKE_KEY.as_bytes(),
    ];
    if let Some(mock) = &g.modal {
        secrets.extend([mock.token_id().as_bytes(), mock.token_secret().as_bytes()]);
    }
    let pids = sandbox_pids(&state, backend);
    assert!(pids.len() >= 2, "found the sandboxes' processes: {pids:?}");
    for pid in &pids {
        for file in ["environ", "cmdline"] {
            let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
            for secret in &secrets {
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == *secret),
                    "a secret is in /proc/{pid}/{file}"
                );
            }
        }
    }
    // The remote's own environment carries its connect token, and nothing
    // of Garrison's.
    let roots = sandbox_roots(&state, backend);
    assert_eq!(roots.len(), 2);
    for root in &roots {
        let hits = grep_tree_for_any(root, &secrets);
        assert!(
            hits.is_empty(),
            "a secret (by index) is in the sandbox's files: {hits:?}"
        );
    }
    for id in &ids {
        emu.terminate(id).unwrap();
    }
    wait_until("cleaned up", Some(&g), || sandbox_dirs(&state) == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_no_token_reaches_a_running_sandbox() {
    no_token_reaches_a_running_sandbox(Backend::Host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensorlake_no_token_reaches_a_running_sandbox() {
    no_token_reaches_a_running_sandbox(Backend::Tensorlake).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_no_token_reaches_a_running_sandbox() {
    if Backend::Local.available() {
        no_token_reaches_a_running_sandbox(Backend::Local).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modal_no_token_reaches_a_running_sandbox() {
    no_token_reaches_a_running_sandbox(Backend::Modal).await;
}

/// A hostile session id is served under a hashed name and never becomes a
/// path. (Oversized and control-character ids are refused by the fleet
/// client's validation, unit-tested in `fleet::wire`, and by the emulator.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_session_ids_name_nothing_outside_the_state_directory() {
    let emu = emulator().await;
    let outpost = outpost(&emu);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let g = Garrison::start(
        &emu,
        GarrisonOptions {
            outpost: &outpost,
            state_dir: &state,
            extra_args: vec![],
        },
    );
    let traversal = emu
        .create_session(emulator::NewSession {
            outpost_id: outpost.clone(),
            session_id: Some("../../etc".into()),
            script: emulator::Script {
                steps: vec![write("x", "y")],
                then: Then::End,
            },
            ..Default::default()
        })
        .unwrap();
    wait_until("the traversal id served", Some(&g), || {
        status_is(&emu, &traversal, fleet::SessionStatus::Terminated) && released(&emu, &traversal)
    })
    .await;
    // Everything Garrison wrote is inside its state directory.
    assert!(!dir.path().join("etc").exists() && !Path::new("/etc/x").exists());
    let session_dir = state.join("sessions").join(sandbox::hashed_id("../../etc"));
    assert!(
        session_dir.join("events.log").exists(),
        "logs live under the hashed id"
    );
}

/// The scan above would see a secret: in a nested file, by its index.
#[test]
fn the_scan_finds_a_planted_secret() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::write(nested.join("clean"), b"nothing here").unwrap();
    std::fs::write(nested.join("leak"), format!("x={GIT_TOKEN}\n")).unwrap();
    let hits = grep_tree_for_any(dir.path(), &[b"absent-secret", GIT_TOKEN.as_bytes()]);
    assert_eq!(hits, [(nested.join("leak"), 1)]);
}
