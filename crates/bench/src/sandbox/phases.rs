//! The measured steps of `garrison bench sandbox`, each through the
//! `Sandbox` trait only, as the session runner drives a backend.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use sandbox::{
    Handle, ProcessRef, ProcessSpec, ProcessStatus, Resources, Sandbox, SandboxName, SandboxSpec,
};

use super::figures::{HelperKind, Lifecycle, Memory, Snapshots};
use super::procs::{self, SandboxKey};
use crate::report::Summary;

/// Put in the environment of every process the bench spawns, with the
/// sandbox's name as value, so `procs` can tell whose a process is.
const MARKER_VAR: &str = "GARRISON_BENCH_SANDBOX";
/// The remote's name inside the sandbox, as the session runner calls it.
const REMOTE_FILE: &str = "devin-remote";
/// Bounds every wait; a healthy step needs a small fraction of it.
const HANG_GUARD: Duration = Duration::from_secs(600);
/// Files per directory of the snapshot workspace: a tree of modest
/// directories, like a checkout, rather than one huge one.
const FILES_PER_DIR: u64 = 200;

/// The backend and what every sandbox of the run is made with.
pub(super) struct Bench {
    pub backend: Arc<dyn Sandbox>,
    pub resources: Resources,
    pub image: Option<String>,
    /// Keeps the names of two runs (or a leftover) apart.
    pub run_id: String,
    /// `spec.network.policy` of every sandbox (the `policy` figures vary it).
    pub policy: fleet::NetworkPolicy,
}

impl Bench {
    pub(super) fn spec(&self, what: &str) -> SandboxSpec {
        let session = format!("bench-{}-{what}", self.run_id);
        SandboxSpec {
            name: SandboxName::for_session(&session),
            labels: sandbox::session_labels(&session, "bench"),
            image: self.image.clone(),
            restore_from: None,
            resources: self.resources,
            network: sandbox::NetworkSpec {
                policy: self.policy.clone(),
                gateway_url: None,
            },
        }
    }

    fn process(&self, handle: &Handle, name: &str, argv: &[&str]) -> ProcessSpec {
        ProcessSpec {
            name: name.to_owned(),
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            env: BTreeMap::from([
                ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
                ("HOME".to_owned(), handle.home.clone()),
                (MARKER_VAR.to_owned(), handle.name.clone()),
            ]),
            cwd: handle.workdir.clone(),
        }
    }

    /// Creates `n` sandboxes one after another and starts the remote in
    /// each; they are left running. `destroy` of the result is not filled.
    pub(super) async fn create_and_start(
        &self,
        n: usize,
        binary: &[u8],
    ) -> anyhow::Result<(Lifecycle, Vec<Handle>)> {
        let mut series: [Vec<f64>; 5] = Default::default();
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let spec = self.spec(&i.to_string());
            let started = Instant::now();
            let handle = self.backend.create(&spec).await.context("create")?;
            let created = Instant::now();
            let path = format!("{}/{REMOTE_FILE}", handle.bin_dir);
            self.backend
                .put_file(&handle, &path, binary, 0o755)
                .await
                .context("put_file")?;
            let put = Instant::now();
            // `--version` prints a line and exits; `sleep` then holds the
            // process Running, as an idle remote waits on its gateway.
            let spec = self.process(
                &handle,
                "remote",
                &[
                    "/bin/sh",
                    "-c",
                    "\"$0\" --version && exec sleep infinity",
                    &path,
                ],
            );
            let process = self.backend.spawn(&handle, &spec).await.context("spawn")?;
            let spawned = Instant::now();
            self.first_line(&handle, &process).await?;
            let done = Instant::now();
            for (k, (from, to)) in [
                (started, created),
                (created, put),
                (put, spawned),
                (spawned, done),
                (started, done),
            ]
            .into_iter()
            .enumerate()
            {
                series[k].push(ms(to - from));
            }
            handles.push(handle);
        }
        let [create, put, spawn, first_output, total] = series.map(|s| Summary::of(&s));
        let lifecycle = Lifecycle {
            create,
            put,
            spawn,
            first_output,
            total,
            destroy: Summary::default(),
        };
        Ok((lifecycle, handles))
    }

    /// Polls until the process has printed a whole line and is Running.
    async fn first_line(&self, handle: &Handle, process: &ProcessRef) -> anyhow::Result<()> {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let chunk = self.backend.read_output(handle, process, 0, 4096).await?;
            let status = self.backend.status(handle, process).await?;
            match status {
                ProcessStatus::Running if chunk.data.contains(&b'\n') => return Ok(()),
                ProcessStatus::Running => {}
                other => bail!(
                    "the remote ended ({other:?}) before it was idle: {}",
                    String::from_utf8_lossy(&chunk.data)
                ),
            }
            if Instant::now() > deadline {
                bail!("the remote printed nothing within {HANG_GUARD:?}");
            }
            // Tokio's timer resolution: the figure is at most 1 ms late.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Resident memory of the processes of `handles`, inside and outside.
    pub(super) async fn memory(&self, handles: &[Handle]) -> Memory {
        // Let the remotes settle into `sleep` and runc calls finish.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let all = procs::scan();
        let own_pid = std::process::id();
        let mut by_name: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut outside = Vec::new();
        let mut inside = Vec::new();
        let mut example = Vec::new();
        for (i, handle) in handles.iter().enumerate() {
            let key = SandboxKey {
                name: handle.name.clone(),
                marker: format!("{MARKER_VAR}={}", handle.name),
            };
            let m = procs::classify(&all, &key, own_pid);
            for helper in &m.helpers {
                by_name
                    .entry(helper.comm.clone())
                    .or_default()
                    .push(mib(helper.rss_kib));
                if i == 0 {
                    example.push(format!(
                        "{} (pid {}) {:.1} MiB",
                        helper.comm,
                        helper.pid,
                        mib(helper.rss_kib)
                    ));
                }
            }
            outside.push(m.helpers.iter().map(|p| mib(p.rss_kib)).sum());
            inside.push(m.inside.iter().map(|p| mib(p.rss_kib)).sum());
        }
        Memory {
            idle_sandboxes: handles.len(),
            helpers: by_name
                .into_iter()
                .map(|(name, rss)| HelperKind {
                    name,
                    rss_mib: Summary::of(&rss),
                })
                .collect(),
            per_sandbox_mib: Summary::of(&outside),
            inside_mib: Summary::of(&inside),
            example,
        }
    }

    /// Destroys each sandbox (its remote still running), timing each.
    pub(super) async fn destroy_each(&self, handles: &[Handle]) -> anyhow::Result<Summary> {
        let mut times = Vec::with_capacity(handles.len());
        for handle in handles {
            let started = Instant::now();
            self.backend.destroy(handle).await.context("destroy")?;
            times.push(ms(started.elapsed()));
        }
        Ok(Summary::of(&times))
    }

    /// Fills a workspace, snapshots it `rounds` times and restores the last
    /// snapshot `rounds` times; durations in seconds.
    pub(super) async fn snapshots(
        &self,
        files: u64,
        file_bytes: u64,
        rounds: usize,
    ) -> anyhow::Result<Snapshots> {
        let handle = self.backend.create(&self.spec("snapshot")).await?;
        let dir = format!("{}/bench-files", handle.workdir);
        let started = Instant::now();
        self.sh(
            &handle,
            "fill",
            FILL_SCRIPT,
            &[
                &dir,
                &files.to_string(),
                &file_bytes.to_string(),
                &FILES_PER_DIR.to_string(),
            ],
        )
        .await
        .context("filling the workspace")?;
        let fill_secs = started.elapsed().as_secs_f64();
        let (count, bytes) = self.count(&handle, "count", &dir).await?;
        if count != files {
            bail!("the workspace holds {count} files, not {files}");
        }

        let mut snapshot_secs = Vec::with_capacity(rounds);
        let mut snapshot = None;
        for _ in 0..rounds {
            let started = Instant::now();
            let taken = self.backend.snapshot(&handle).await.context("snapshot")?;
            snapshot_secs.push(started.elapsed().as_secs_f64());
            if let Some(previous) = snapshot.replace(taken) {
                self.backend.delete_snapshot(&previous).await?;
            }
        }
        let snapshot = snapshot.expect("rounds >= 1");
        // Restores run on a host without the filled sandbox, as a resume
        // does after the suspend destroyed it.
        self.backend.destroy(&handle).await?;

        let mut restore_secs = Vec::with_capacity(rounds);
        let mut restored = (0, 0);
        for round in 0..rounds {
            let spec = SandboxSpec {
                restore_from: Some(snapshot.clone()),
                ..self.spec(&format!("restore-{round}"))
            };
            let started = Instant::now();
            let handle = self.backend.create(&spec).await.context("restore")?;
            restore_secs.push(started.elapsed().as_secs_f64());
            if round + 1 == rounds {
                restored = self.count(&handle, "count", &dir).await?;
            }
            self.backend.destroy(&handle).await?;
        }
        self.backend.delete_snapshot(&snapshot).await?;
        Ok(Snapshots {
            files,
            workspace_bytes: bytes,
            fill_secs,
            archive_bytes: snapshot.size_bytes,
            snapshot: Summary::of(&snapshot_secs),
            restore: Summary::of(&restore_secs),
            restored_files: restored.0,
            restored_bytes: restored.1,
        })
    }

    /// Files under `dir` inside the sandbox and the sum of their sizes.
    async fn count(&self, handle: &Handle, name: &str, dir: &str) -> anyhow::Result<(u64, u64)> {
        let out = self.sh(handle, name, COUNT_SCRIPT, &[dir]).await?;
        let mut fields = out.split_whitespace().map(str::parse::<u64>);
        match (fields.next(), fields.next()) {
            (Some(Ok(count)), Some(Ok(bytes))) => Ok((count, bytes)),
            _ => Err(anyhow!("unexpected count output {out:?}")),
        }
    }

    /// Runs `script` with `args` ($0, $1, ...) under `/bin/sh` in the
    /// sandbox, waits for it and returns its output; a non-zero exit fails.
    pub(super) async fn sh(
        &self,
        handle: &Handle,
        name: &str,
        script: &str,
        args: &[&str],
    ) -> anyhow::Result<String> {
        let mut argv = vec!["/bin/sh", "-c", script];
        argv.extend_from_slice(args);
        let process = self
            .backend
            .spawn(handle, &self.process(handle, name, &argv))
            .await?;
        let status = tokio::time::timeout(
            HANG_GUARD,
            sandbox::wait_exit(
                self.backend.as_ref(),
                handle,
                &process,
                Duration::from_millis(20),
            ),
        )
        .await
        .map_err(|_| anyhow!("{name} did not finish within {HANG_GUARD:?}"))??;
        let mut output = Vec::new();
        loop {
            let chunk = self
                .backend
                .read_output(handle, &process, output.len() as u64, 1 << 20)
                .await?;
            if chunk.data.is_empty() {
                break;
            }
            output.extend(chunk.data);
        }
        let output = String::from_utf8_lossy(&output).into_owned();
        if status != ProcessStatus::Exited(0) {
            bail!("{name} ended with {status:?}: {}", output.trim());
        }
        Ok(output)
    }
}

/// `$0` directory, `$1` files, `$2` bytes each, `$3` files per directory:
/// one `head | split` per directory, so the data is random (zstd cannot
/// shrink it) and the shell forks a few hundred times, not 20 000.
const FILL_SCRIPT: &str = r#"set -e
n=$1; d=0
while [ "$n" -gt 0 ]; do
    if [ "$n" -lt "$3" ]; then c=$n; else c=$3; fi
    mkdir -p "$0/d$d"
    head -c $((c * $2)) /dev/urandom | split -a 4 -d -b "$2" - "$0/d$d/f"
    n=$((n - c)); d=$((d + 1))
done"#;

/// `$0` directory: prints "<files> <bytes>".
const COUNT_SCRIPT: &str =
    r#"find "$0" -type f -printf '%s\n' | awk '{ s += $1 } END { print NR, s + 0 }'"#;

/// Destroys every sandbox the backend lists (the scratch directory holds
/// only the bench's), returning the first failure after trying them all.
pub(super) async fn destroy_all(backend: &dyn Sandbox) -> anyhow::Result<()> {
    let mut first_error = None;
    for handle in backend.list().await? {
        if let Err(e) = backend.destroy(&handle).await {
            first_error.get_or_insert(anyhow!("destroying {}: {e}", handle.name));
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
