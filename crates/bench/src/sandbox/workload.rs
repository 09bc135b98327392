//! The syscall-heavy workload of `garrison bench sandbox`: `git status` on
//! a repository of `--workload-files` files made inside one sandbox. Each
//! run stats every file of the tree (and reads the index), so it is
//! dominated by system calls: where runc and runsc (gVisor, on the ptrace
//! platform) differ most. Timed inside the sandbox, so the figure is the
//! command's own time, not the cost of starting a process in the sandbox.

use anyhow::{Context, anyhow};

use super::phases::Bench;
use crate::report::Summary;

/// What the workload measured.
#[derive(Clone, Debug)]
pub(super) struct Workload {
    pub files: u64,
    /// Seconds `git init`, `add` and `commit` of the tree took (setup).
    pub setup_secs: f64,
    /// Milliseconds of each `git status`.
    pub status_ms: Summary,
}

/// `$0` directory, `$1` files: 100 files a directory, one line each (shell
/// builtins but one `mkdir` a directory: forks are what gVisor makes
/// slowest, and this is setup), then committed, so the timed `git status`
/// below finds a clean tree.
const SETUP_SCRIPT: &str = r#"set -e
mkdir -p "$0"; cd "$0"
i=0
while [ "$i" -lt "$1" ]; do
    d="d$((i / 100))"; [ $((i % 100)) -ne 0 ] || mkdir "$d"; echo "$i" > "$d/f$i"; i=$((i + 1))
done
git init -q . && git add -A
git -c user.name=bench -c user.email=bench@localhost commit -qm tree"#;

/// `$0` directory: one `git status`, its nanoseconds on the sandbox's clock.
const STATUS_SCRIPT: &str = r#"set -e
cd "$0"
start=$(date +%s%N); git status --porcelain > /dev/null; end=$(date +%s%N)
echo $((end - start))"#;

/// Makes the tree in a fresh sandbox and runs `git status` `rounds` times.
pub(super) async fn measure(bench: &Bench, files: u64, rounds: usize) -> anyhow::Result<Workload> {
    let handle = bench.backend.create(&bench.spec("workload")).await?;
    let dir = format!("{}/bench-repo", handle.workdir);
    let result = async {
        let started = std::time::Instant::now();
        bench
            .sh(&handle, "repo", SETUP_SCRIPT, &[&dir, &files.to_string()])
            .await
            .context("making the repository")?;
        let setup_secs = started.elapsed().as_secs_f64();
        let mut ms = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let out = bench
                .sh(&handle, &format!("status-{round}"), STATUS_SCRIPT, &[&dir])
                .await?;
            let ns: u64 = out
                .trim()
                .parse()
                .map_err(|_| anyhow!("unexpected git status timing {out:?}"))?;
            ms.push(ns as f64 / 1e6);
        }
        Ok(Workload {
            files,
            setup_secs,
            status_ms: Summary::of(&ms),
        })
    }
    .await;
    bench.backend.destroy(&handle).await?;
    result
}
