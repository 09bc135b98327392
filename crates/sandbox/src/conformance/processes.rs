//! Conformance checks on processes: exit codes, environment, working
//! directory, kill, unique names, and surviving an orchestrator restart.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::ensure;

use super::harness::Harness;
use crate::{ProcessRef, ProcessSpec, ProcessStatus};

/// A process runs and its exit code is reported.
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

/// A process sees exactly the environment it was given.
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

/// A process runs in the sandbox's working directory.
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

/// `kill` stops a running process.
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

/// A process keeps running, and its status and output stay readable,
/// through a fresh instance of the backend.
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

/// Spawning a process name that exists is an error.
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
