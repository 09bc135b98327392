//! Conformance checks on whole sandboxes: snapshots and restores,
//! listing by label, and destroy.

use anyhow::{Context, bail, ensure};

use super::harness::Harness;
use crate::{Lineage, ProcessStatus, SandboxName};

/// A snapshot carries its sandbox's lineage and restores the workspace
/// into a new sandbox.
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
    // The lineage a resume orders snapshots by is the sandbox's (a found
    // copy, below, must carry it too: another host orders by it).
    let lineage = Lineage::from_labels(&h.spec("lineage").labels);
    ensure!(
        lineage.is_some() && snapshot.lineage == lineage,
        "the snapshot carries lineage {:?}, its sandbox {lineage:?}",
        snapshot.lineage
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

/// Restoring from a snapshot that no longer exists is gone.
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

/// `list` finds sandboxes with their labels, and `destroy` is idempotent.
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
    // A finished sandbox is no remains of an interrupted create.
    ensure!(
        !h.backend.remove_remains(&spec.name).await?,
        "remove_remains reported a finished sandbox as remains"
    );
    ensure!(
        h.backend.find(&spec.name).await?.is_some(),
        "remove_remains removed a finished sandbox"
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
    ensure!(
        !h.backend.remove_remains(&spec.name).await?,
        "remove_remains found remains of a destroyed sandbox"
    );
    Ok(())
}

/// `destroy` stops the processes, whose status is then gone.
pub async fn destroy_stops_processes_and_status_is_gone(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("destroy").await?;
    let process = h.sh(&sandbox, "sleep 1000").await?;
    h.backend.destroy(&sandbox).await?;
    match h.backend.status(&sandbox, &process).await {
        Err(e) if e.is_gone() => Ok(()),
        other => bail!("status after destroy: {other:?}"),
    }
}
