//! The conformance suite every backend must pass.
//!
//! Each check is a plain async function over a [`Harness`], so a backend's
//! test file instantiates all of them with [`conformance_tests!`]:
//!
//! ```ignore
//! sandbox::conformance_tests!(my_harness().await);
//! // A backend that needs what not every machine has (root, an image):
//! sandbox::conformance_tests!(optional: harness_if_possible());
//! ```
//!
//! The checks use only `/bin/sh` and coreutils inside the sandbox, which
//! every image Garrison builds has.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use sha2::{Digest, Sha256};

use crate::{
    Handle, ProcessRef, ProcessSpec, ProcessStatus, Resources, Sandbox, SandboxName, SandboxSpec,
};

/// A backend under test, and a way to get a fresh instance of it (the same
/// configuration, nothing kept in memory) to prove that sandboxes and
/// processes survive an orchestrator restart.
pub struct Harness {
    pub backend: Arc<dyn Sandbox>,
    pub reopen: Box<dyn Fn() -> Arc<dyn Sandbox> + Send + Sync>,
    /// Passed as the image of every sandbox the suite creates.
    pub image: Option<String>,
    /// The backend implements [`Sandbox::snapshots_for`].
    pub finds_snapshots_by_name: bool,
}

/// Bounds a hung check; never an assertion about speed.
const HANG_GUARD: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(25);

impl Harness {
    fn spec(&self, label: &str) -> SandboxSpec {
        let session = format!("conformance-{label}-{:016x}", rand::random::<u64>());
        SandboxSpec {
            name: SandboxName::for_session(&session),
            labels: BTreeMap::from([
                (crate::LABEL_SESSION_ID.to_owned(), session),
                (
                    crate::LABEL_OUTPOST_ID.to_owned(),
                    "outpost_conformance".to_owned(),
                ),
            ]),
            image: self.image.clone(),
            restore_from: None,
            resources: Resources {
                cpus: 1.0,
                memory_mb: 512,
                disk_mb: 1024,
            },
            network: Default::default(),
        }
    }

    async fn create(&self, label: &str) -> anyhow::Result<Handle> {
        Ok(self.backend.create(&self.spec(label)).await?)
    }

    async fn sh(&self, handle: &Handle, script: &str) -> anyhow::Result<ProcessRef> {
        let spec = ProcessSpec {
            name: format!("sh-{:08x}", rand::random::<u32>()),
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            env: BTreeMap::from([("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())]),
            cwd: handle.workdir.clone(),
        };
        Ok(self.backend.spawn(handle, &spec).await?)
    }

    async fn wait(
        &self,
        backend: &dyn Sandbox,
        handle: &Handle,
        process: &ProcessRef,
    ) -> anyhow::Result<ProcessStatus> {
        tokio::time::timeout(HANG_GUARD, crate::wait_exit(backend, handle, process, POLL))
            .await
            .context("process did not finish")?
            .map_err(Into::into)
    }

    async fn output(&self, handle: &Handle, process: &ProcessRef) -> anyhow::Result<String> {
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let chunk = self
                .backend
                .read_output(handle, process, offset, 64 * 1024)
                .await?;
            if chunk.data.is_empty() {
                break;
            }
            offset = chunk.next_offset;
            out.extend(chunk.data);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Runs a script to completion and returns its exit code and output.
    async fn run(&self, handle: &Handle, script: &str) -> anyhow::Result<(ProcessStatus, String)> {
        let process = self.sh(handle, script).await?;
        let status = self.wait(self.backend.as_ref(), handle, &process).await?;
        Ok((status, self.output(handle, &process).await?))
    }
}

pub async fn runs_a_process_and_reports_its_exit_code(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("exit").await?;
    let (status, output) = h.run(&sandbox, "echo hello; echo oops >&2; exit 3").await?;
    ensure!(status == ProcessStatus::Exited(3), "status {status:?}");
    ensure!(
        output.contains("hello") && output.contains("oops"),
        "output {output:?}"
    );
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

pub async fn process_sees_exactly_the_given_environment(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("env").await?;
    let spec = ProcessSpec {
        name: "env".into(),
        argv: vec!["/usr/bin/env".into()],
        env: BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("GARRISON_CONFORMANCE".to_owned(), "yes".to_owned()),
        ]),
        cwd: sandbox.workdir.clone(),
    };
    let process = h.backend.spawn(&sandbox, &spec).await?;
    h.wait(h.backend.as_ref(), &sandbox, &process).await?;
    let mut lines: Vec<String> = h
        .output(&sandbox, &process)
        .await?
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    ensure!(
        lines == ["GARRISON_CONFORMANCE=yes", "PATH=/usr/bin:/bin"],
        "environment {lines:?}"
    );
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

pub async fn runs_in_the_workdir(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("cwd").await?;
    let (_, output) = h.run(&sandbox, "pwd").await?;
    ensure!(
        output.trim() == sandbox.workdir,
        "pwd {output:?}, workdir {}",
        sandbox.workdir
    );
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

/// The remote is started in the directory whose direct children are the
/// repositories, which for a workspace from before that layout is a
/// directory below the workdir; its state directory must not be among them.
pub async fn runs_below_the_workdir_and_keeps_state_outside(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("subdir").await?;
    ensure!(
        !format!("{}/", sandbox.state_dir).starts_with(&format!("{}/", sandbox.workdir)),
        "state dir {} is inside the workdir {}",
        sandbox.state_dir,
        sandbox.workdir
    );
    let (status, _) = h.run(&sandbox, "mkdir -p repos/a").await?;
    ensure!(status == ProcessStatus::Exited(0), "mkdir: {status:?}");
    let below = format!("{}/repos", sandbox.workdir);
    let spec = ProcessSpec {
        name: "pwd-below".into(),
        argv: vec!["/bin/sh".into(), "-c".into(), "pwd; ls".into()],
        env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
        cwd: below.clone(),
    };
    let process = h.backend.spawn(&sandbox, &spec).await?;
    h.wait(h.backend.as_ref(), &sandbox, &process).await?;
    let output = h.output(&sandbox, &process).await?;
    let lines: Vec<&str> = output.lines().collect();
    ensure!(
        lines == [below.as_str(), "a"],
        "output {output:?}, cwd {below}"
    );
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

pub async fn put_file_writes_an_executable(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("files").await?;
    let path = format!("{}/tool", sandbox.bin_dir);
    h.backend
        .put_file(&sandbox, &path, b"#!/bin/sh\necho tool-ran \"$1\"\n", 0o755)
        .await?;
    // Overwriting is allowed and atomic.
    h.backend
        .put_file(
            &sandbox,
            &path,
            b"#!/bin/sh\necho tool-ran-2 \"$1\"\n",
            0o755,
        )
        .await?;
    let (status, output) = h.run(&sandbox, &format!("{path} arg")).await?;
    ensure!(
        status == ProcessStatus::Exited(0),
        "status {status:?} output {output:?}"
    );
    ensure!(output.trim() == "tool-ran-2 arg", "output {output:?}");
    let (_, mode) = h.run(&sandbox, &format!("stat -c %a {path}")).await?;
    ensure!(mode.trim() == "755", "mode {mode:?}");
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

pub async fn put_executable_places_a_runnable_copy(h: &Harness) -> anyhow::Result<()> {
    let script: &[u8] = b"#!/bin/sh\necho executable-ran \"$1\"\n";
    let sha256 = hex::encode(Sha256::digest(script));
    let tool = |sandbox: &Handle| format!("{}/tool", sandbox.bin_dir);
    let runs = async |sandbox: &Handle, expected: &str| -> anyhow::Result<()> {
        let (status, output) = h.run(sandbox, &format!("{} arg", tool(sandbox))).await?;
        ensure!(
            status == ProcessStatus::Exited(0) && output.trim() == expected,
            "in {}: status {status:?} output {output:?}, expected {expected:?}",
            sandbox.name
        );
        Ok(())
    };
    let a = h.create("exe-a").await?;
    let b = h.create("exe-b").await?;
    for sandbox in [&a, &b] {
        h.backend
            .put_executable(sandbox, &tool(sandbox), script, &sha256)
            .await?;
        runs(sandbox, "executable-ran arg").await?;
    }

    // Replacing one sandbox's copy leaves the other's alone.
    h.backend
        .put_file(&a, &tool(&a), b"#!/bin/sh\necho replaced\n", 0o755)
        .await?;
    runs(&a, "replaced").await?;
    runs(&b, "executable-ran arg").await?;
    // And it can be put again over a file of its own.
    h.backend
        .put_executable(&a, &tool(&a), script, &sha256)
        .await?;
    runs(&a, "executable-ran arg").await?;

    // A process changing its copy in place does not change what the next
    // sandbox gets.
    let (status, output) = h
        .run(
            &b,
            &format!(
                "chmod u+w {path} && printf tampered > {path} && cat {path}",
                path = tool(&b)
            ),
        )
        .await?;
    ensure!(
        status == ProcessStatus::Exited(0) && output.trim() == "tampered",
        "tampering in {}: status {status:?} output {output:?}",
        b.name
    );
    let c = h.create("exe-c").await?;
    h.backend
        .put_executable(&c, &tool(&c), script, &sha256)
        .await?;
    runs(&c, "executable-ran arg").await?;

    for sandbox in [&a, &b, &c] {
        h.backend.destroy(sandbox).await?;
    }
    Ok(())
}

pub async fn put_file_refuses_paths_outside(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("escape").await?;
    for bad in [
        format!("{}/../../../escape", sandbox.workdir),
        "relative/path".to_owned(),
    ] {
        ensure!(
            h.backend
                .put_file(&sandbox, &bad, b"x", 0o644)
                .await
                .is_err(),
            "{bad} was accepted"
        );
    }
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

pub async fn kill_stops_a_running_process(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("kill").await?;
    let process = h.sh(&sandbox, "sleep 1000 & sleep 1000").await?;
    ensure!(h.backend.status(&sandbox, &process).await? == ProcessStatus::Running);
    h.backend
        .kill(&sandbox, &process, Duration::from_secs(5))
        .await?;
    let status = h.wait(h.backend.as_ref(), &sandbox, &process).await?;
    ensure!(status != ProcessStatus::Running, "still running");
    // Killing again is harmless.
    h.backend
        .kill(&sandbox, &process, Duration::from_millis(100))
        .await?;
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

pub async fn snapshot_restores_the_workspace(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("snap").await?;
    let script = "mkdir -p repo/sub && echo kept > repo/sub/file && echo gone > repo/deleted \
                  && rm repo/deleted && ln -s sub/file repo/link && chmod 640 repo/sub/file \
                  && echo state > \"$0\"/marker";
    let (status, out) = h
        .run(&sandbox, &script.replace("$0", &sandbox.state_dir))
        .await?;
    ensure!(status == ProcessStatus::Exited(0), "setup failed: {out}");
    let snapshot = h.backend.snapshot(&sandbox).await?;
    ensure!(
        h.backend.snapshot_exists(&snapshot).await?,
        "snapshot missing"
    );
    if h.finds_snapshots_by_name {
        let name = SandboxName::parse(&sandbox.name).context("sandbox name")?;
        let found = (h.reopen)().snapshots_for(&name).await?;
        ensure!(
            found.last() == Some(&snapshot),
            "snapshots_for found {found:?}"
        );
    }
    h.backend.destroy(&sandbox).await?;

    let mut spec = h.spec("restored");
    spec.restore_from = Some(snapshot.clone());
    let restored = h.backend.create(&spec).await?;
    let check = format!(
        "cat repo/sub/file && readlink repo/link && stat -c %a repo/sub/file && cat {}/marker \
         && test ! -e repo/deleted && echo deleted-stays-deleted",
        restored.state_dir
    );
    let (status, output) = h.run(&restored, &check).await?;
    ensure!(status == ProcessStatus::Exited(0), "check failed: {output}");
    let lines: Vec<&str> = output.lines().collect();
    ensure!(
        lines == ["kept", "sub/file", "640", "state", "deleted-stays-deleted"],
        "restored {lines:?}"
    );

    h.backend.delete_snapshot(&snapshot).await?;
    ensure!(
        !h.backend.snapshot_exists(&snapshot).await?,
        "snapshot not deleted"
    );
    h.backend.delete_snapshot(&snapshot).await?;
    h.backend.destroy(&restored).await?;
    Ok(())
}

pub async fn restore_from_a_missing_snapshot_is_gone(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("nosnap").await?;
    let mut snapshot = h.backend.snapshot(&sandbox).await?;
    h.backend.destroy(&sandbox).await?;
    h.backend.delete_snapshot(&snapshot).await?;
    snapshot.size_bytes = 0;
    let mut spec = h.spec("nosnap-restore");
    spec.restore_from = Some(snapshot);
    match h.backend.create(&spec).await {
        Err(e) if e.is_gone() => {}
        Err(e) => bail!("expected gone, got {e}"),
        Ok(handle) => {
            h.backend.destroy(&handle).await?;
            bail!("restored from a deleted snapshot");
        }
    }
    // Nothing may be left behind by the failed create.
    let left = h.backend.list().await?;
    ensure!(
        !left.iter().any(|s| s.name == spec.name.as_str()),
        "failed create left a sandbox"
    );
    Ok(())
}

pub async fn list_finds_sandboxes_with_labels_and_destroy_is_idempotent(
    h: &Harness,
) -> anyhow::Result<()> {
    let spec = h.spec("list");
    let sandbox = h.backend.create(&spec).await?;
    let found = h.backend.list().await?;
    let mine = found
        .iter()
        .find(|s| s.name == sandbox.name)
        .context("sandbox not listed")?;
    ensure!(mine.labels == spec.labels, "labels {:?}", mine.labels);
    let by_name = h.backend.find(&spec.name).await?;
    ensure!(
        by_name.as_ref() == Some(mine),
        "find gave {by_name:?}, list {mine:?}"
    );
    ensure!(
        h.backend.create(&spec).await.is_err(),
        "a second sandbox with the same name was created"
    );
    h.backend.destroy(&sandbox).await?;
    h.backend.destroy(&sandbox).await?;
    ensure!(
        !h.backend
            .list()
            .await?
            .iter()
            .any(|s| s.name == sandbox.name),
        "destroyed sandbox listed"
    );
    ensure!(
        h.backend.find(&spec.name).await?.is_none(),
        "destroyed sandbox found by name"
    );
    Ok(())
}

pub async fn destroy_stops_processes_and_status_is_gone(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("destroy").await?;
    let process = h.sh(&sandbox, "sleep 1000").await?;
    h.backend.destroy(&sandbox).await?;
    match h.backend.status(&sandbox, &process).await {
        Err(e) if e.is_gone() => Ok(()),
        other => bail!("status after destroy: {other:?}"),
    }
}

pub async fn processes_survive_a_restart_of_the_orchestrator(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("restart").await?;
    let go = format!("{}/go", sandbox.workdir);
    let process = h
        .sh(
            &sandbox,
            &format!(
                "echo started; while [ ! -e {go} ]; do sleep 0.05; done; echo finished; exit 7"
            ),
        )
        .await?;
    // A new backend instance knows only what the orchestrator stored.
    let reopened = (h.reopen)();
    ensure!(
        reopened.status(&sandbox, &process).await? == ProcessStatus::Running,
        "not running after reopen"
    );
    ensure!(
        reopened
            .list()
            .await?
            .iter()
            .any(|s| s.name == sandbox.name),
        "not listed after reopen"
    );
    reopened.put_file(&sandbox, &go, b"", 0o644).await?;
    let status = h.wait(reopened.as_ref(), &sandbox, &process).await?;
    ensure!(status == ProcessStatus::Exited(7), "status {status:?}");
    let output = h.output(&sandbox, &process).await?;
    ensure!(
        output.contains("started") && output.contains("finished"),
        "output {output:?}"
    );
    reopened.destroy(&sandbox).await?;
    Ok(())
}

pub async fn process_names_are_unique(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("names").await?;
    let spec = ProcessSpec {
        name: "remote-1".into(),
        argv: vec!["/bin/sh".into(), "-c".into(), "sleep 1000".into()],
        env: BTreeMap::new(),
        cwd: sandbox.workdir.clone(),
    };
    let first = h.backend.spawn(&sandbox, &spec).await?;
    ensure!(
        h.backend.spawn(&sandbox, &spec).await.is_err(),
        "a second process took the same name"
    );
    let unknown = ProcessRef {
        id: "never-spawned".into(),
    };
    ensure!(
        matches!(h.backend.status(&sandbox, &unknown).await, Err(e) if e.is_gone()),
        "status of a name never spawned must be gone"
    );
    h.backend
        .kill(&sandbox, &first, Duration::from_secs(5))
        .await?;
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

/// Instantiates every conformance check as a `#[tokio::test]`.
///
/// `conformance_tests!(harness)` takes an expression that evaluates (inside
/// an async context) to a [`Harness`]. `conformance_tests!(optional:
/// harness)` takes one that evaluates to an `Option<Harness>`, for a backend
/// that cannot run everywhere: on `None` each test passes without checking
/// anything, so the expression should say why it gave none.
///
/// The list of checks is here and nowhere else, so a new check runs on every
/// backend; the unit test below fails if a `pub async fn` of this module is
/// missing from it.
#[macro_export]
macro_rules! conformance_tests {
    // Hands the list of checks to another arm, so it is written only once.
    (@checks $($then:tt)*) => {
        // Braces, not parentheses and a semicolon: the expansion is items
        // for `@each` and an expression for `@names`.
        $crate::conformance_tests! {$($then)*;
            runs_a_process_and_reports_its_exit_code,
            process_sees_exactly_the_given_environment,
            runs_in_the_workdir,
            runs_below_the_workdir_and_keeps_state_outside,
            put_file_writes_an_executable,
            put_executable_places_a_runnable_copy,
            put_file_refuses_paths_outside,
            kill_stops_a_running_process,
            snapshot_restores_the_workspace,
            restore_from_a_missing_snapshot_is_gone,
            list_finds_sandboxes_with_labels_and_destroy_is_idempotent,
            destroy_stops_processes_and_status_is_gone,
            process_names_are_unique,
            processes_survive_a_restart_of_the_orchestrator,
        }
    };
    (@names; $($check:ident),+ $(,)?) => {
        [$(stringify!($check)),+]
    };
    (@each $harness:expr; $($check:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let Some(harness) = $harness else { return };
                $crate::conformance::$check(&harness).await.unwrap();
            }
        )+
    };
    (optional: $harness:expr) => {
        $crate::conformance_tests!(@checks @each $harness);
    };
    ($harness:expr) => {
        $crate::conformance_tests!(@checks @each ::core::option::Option::Some($harness));
    };
}

#[cfg(test)]
mod tests {
    /// Every `pub async fn` at the start of a line of this file is a check;
    /// helpers are methods of [`super::Harness`] or private.
    #[test]
    fn the_macro_lists_every_check() {
        let mut defined: Vec<&str> = include_str!("conformance.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .map(|rest| rest.split(['(', '<']).next().unwrap_or(rest).trim())
            .collect();
        let mut listed: Vec<&str> = crate::conformance_tests!(@checks @names).to_vec();
        defined.sort_unstable();
        listed.sort_unstable();
        assert!(!defined.is_empty(), "no checks found in the source");
        assert_eq!(
            defined, listed,
            "conformance_tests! must list exactly the pub async fns of conformance.rs"
        );
    }
}
