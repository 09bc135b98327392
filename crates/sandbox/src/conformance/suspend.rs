//! The conformance check that a suspend keeps the sandbox's processes:
//! what a Devin session expects of Modal's memory snapshots, Tensorlake's
//! suspend and gVisor's checkpoint alike. A backend that cannot keep them
//! says why ([`crate::Sandbox::memory_suspend_unavailable`]) and the check
//! is skipped with that reason.

use anyhow::{Context, ensure};

use super::harness::Harness;
use crate::{Handle, ProcessStatus};

/// Counts one line a tick into a file it keeps open: a process that
/// survived goes on from where it was, one started again begins at 1
/// again, one lost stops writing.
const COUNTER: &str = "i=0; exec 3>>counter.log; \
                       while :; do i=$((i+1)); echo $i >&3; sleep 0.05; done";

/// Waits (bounded, only against a hang) until the counter has written more
/// than `$1` lines, then prints how many it has.
const LINES_ABOVE: &str = "n=0; while [ \"$(wc -l < counter.log)\" -le $1 ] && [ $n -lt 2400 ]; \
                           do n=$((n+1)); sleep 0.025; done; wc -l < counter.log";

/// Succeeds when the log is exactly 1, 2, 3, ...: the counter never started
/// again from 1 nor skipped.
const COUNTS_IN_ORDER: &str = "n=0; while read -r v; do n=$((n+1)); \
                               [ \"$v\" = \"$n\" ] || { echo \"line $n is $v\"; exit 1; }; \
                               done < counter.log; echo in-order";

/// A process started before a suspend is, after the resume, the same one:
/// still running under its old reference, counting on from where it was
/// into the file it kept open.
pub async fn processes_survive_suspend_and_resume(h: &Harness) -> anyhow::Result<()> {
    if let Some(reason) = h.backend.memory_suspend_unavailable() {
        eprintln!("skipped: processes survive suspend and resume: {reason}");
        return Ok(());
    }
    let sandbox = h.create("memory").await?;
    let counter = h.sh(&sandbox, COUNTER).await?;
    let before = count_above(h, &sandbox, 2).await?;

    h.backend.suspend(&sandbox).await?;
    h.backend.resume(&sandbox).await?;

    ensure!(
        h.backend.status(&sandbox, &counter).await? == ProcessStatus::Running,
        "the counter is not running after the resume"
    );
    // Past what it had written before the suspend, in one unbroken count.
    count_above(h, &sandbox, before + 2).await?;
    let (status, out) = h.run(&sandbox, COUNTS_IN_ORDER).await?;
    ensure!(
        status == ProcessStatus::Exited(0) && out.trim() == "in-order",
        "the counter did not go on from where it was: {out}"
    );
    h.backend
        .kill(&sandbox, &counter, std::time::Duration::from_secs(5))
        .await?;
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

/// How many lines the counter has written, once more than `above`.
async fn count_above(h: &Harness, sandbox: &Handle, above: usize) -> anyhow::Result<usize> {
    let (status, out) = h
        .run(sandbox, &LINES_ABOVE.replace("$1", &above.to_string()))
        .await?;
    ensure!(status == ProcessStatus::Exited(0), "wc: {out}");
    let n: usize = out.trim().parse().context("line count")?;
    ensure!(n > above, "the counter stopped at {n} lines");
    Ok(n)
}
