//! The OCI runtime, driven through its command line: runc, or gVisor's
//! runsc (see [`Runtime`]).
//!
//! Garrison keeps its containers under a state root of its own per runtime,
//! so `runc list` (`runsc list`) there is exactly Garrison's containers and
//! nothing else on the machine can be mistaken for one.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::cmd::{output, run};
use crate::reaper;

/// The cgroup (below each hierarchy's root) of container `id`.
pub(crate) fn cgroups_path(id: &str) -> String {
    format!("{}/{id}", reaper::SANDBOX_CGROUPS)
}

/// Whether `/proc/<pid>/cgroup` text puts the process in `path` (in any
/// hierarchy: cgroup v1 lists one line per hierarchy, v2 one line).
fn in_cgroup(proc_cgroup: &str, path: &str) -> bool {
    proc_cgroup
        .lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .any(|p| p == path)
}

/// Hands the process whose pid runc wrote in `pid_file` to the reaper.
fn adopt_recorded(pid_file: &Path) {
    if let Some(pid) = std::fs::read_to_string(pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok())
    {
        reaper::adopt(pid);
    }
}

/// Which OCI runtime runs a sandbox's container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// Namespaces, cgroups and a seccomp filter on the host's kernel.
    #[default]
    Runc,
    /// gVisor: the sandbox's system calls are served by a kernel in user
    /// space (the Sentry), on the `ptrace` platform.
    Runsc,
}

impl Runtime {
    /// Both, runc first (tests and the bench run each).
    pub const ALL: [Runtime; 2] = [Runtime::Runc, Runtime::Runsc];

    /// The setting's spelling, and the command's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Runc => "runc",
            Runtime::Runsc => "runsc",
        }
    }

    /// Where Debian's package installs it.
    pub fn default_binary(self) -> PathBuf {
        PathBuf::from(match self {
            Runtime::Runc => "/usr/sbin/runc",
            Runtime::Runsc => "/usr/bin/runsc",
        })
    }

    /// Flags before the subcommand, besides `--root` and `--log`.
    ///
    /// For runsc (Debian's 2022-12 release):
    /// - `--platform=ptrace`: works without KVM (nested virtualisation is
    ///   rarely there); slower on system calls, see SECURITY.md.
    /// - `--network=host`: the Sentry's sockets are host sockets *in the
    ///   sandbox's own network namespace* (the OCI config names it), so the
    ///   namespace's nftables ruleset and its resolver on 127.0.0.53 apply
    ///   exactly as under runc. gVisor's own netstack (`--network=sandbox`)
    ///   would bypass that ruleset, and this runsc refuses it anyway on
    ///   kernels since 6.x, whose per-namespace `net.core.rmem_default`
    ///   fools its "root network namespace" check.
    /// - `--file-access=shared`: the host writes into the root filesystem
    ///   while the sandbox runs (process requests, `put_file`) and reads
    ///   what the sandbox writes (output, exit codes); the default,
    ///   `exclusive`, lets the Sentry cache files as if nobody else did.
    /// - `--overlay2=none`: writes go to the root filesystem on the host
    ///   (the sandbox's disk), never to a layer in the Sentry's memory, so
    ///   the host sees them and snapshots keep them.
    /// - `--oci-seccomp`: the config's seccomp filter applies inside the
    ///   Sentry too. This release applies it to the container's init only,
    ///   not to processes started by `runsc exec`; what confines those is
    ///   the Sentry itself, under gVisor's own seccomp filter on the host.
    fn global_flags(self) -> &'static [&'static str] {
        match self {
            Runtime::Runc => &[],
            Runtime::Runsc => &[
                "--platform=ptrace",
                "--network=host",
                "--file-access=shared",
                "--overlay2=none",
                "--oci-seccomp",
            ],
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Runtime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "runc" => Ok(Runtime::Runc),
            "runsc" => Ok(Runtime::Runsc),
            other => Err(format!("{other:?} is not runc or runsc")),
        }
    }
}

/// An OCI runtime's command line, with Garrison's state root for it.
#[derive(Clone, Debug)]
pub(crate) struct Runc {
    pub runtime: Runtime,
    pub binary: PathBuf,
    pub state_root: PathBuf,
}

/// What `runc state` reports.
#[derive(Debug, Deserialize)]
pub(crate) struct State {
    /// `created`, `running`, `paused` or `stopped`.
    #[serde(default)]
    pub status: String,
}

/// Longest a destroy waits for a killed init to die before leaving the
/// rest to `runc delete --force`; a healthy one needs milliseconds.
const DEATH_GUARD: std::time::Duration = std::time::Duration::from_secs(10);

/// How often `delete` asks the runtime again while a dying container's
/// init is still being torn down, and how long it waits in between.
const DELETE_RETRIES: u32 = 20;
const DELETE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Longest a program run in a sandbox on the host's behalf may take (see
/// [`Runc::exec_wait`]); a healthy one needs well under a second.
const EXEC_WAIT_GUARD: std::time::Duration = std::time::Duration::from_secs(10);

impl Runc {
    fn args(&self, rest: &[&str]) -> Vec<String> {
        let mut v = vec!["--root".to_owned(), self.state_root.display().to_string()];
        v.extend(self.runtime.global_flags().iter().map(|s| s.to_string()));
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    }

    async fn call(&self, rest: &[&str]) -> anyhow::Result<Vec<u8>> {
        let args = self.args(rest);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        output(&self.binary.to_string_lossy(), &refs, &[]).await
    }

    /// Runs a command that leaves a process behind. That process inherits
    /// runc's stdio, so pipes would never reach end-of-file: stdio is null
    /// and runc's own messages go to `log`, read back on failure.
    async fn call_detached(&self, log: &Path, rest: &[&str]) -> anyhow::Result<()> {
        let log = log.display().to_string();
        let args = self.args(&[&["--log", log.as_str()][..], rest].concat());
        let status = tokio::process::Command::new(&self.binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .with_context(|| format!("running {}", self.binary.display()))?;
        if status.success() {
            return Ok(());
        }
        let log_text = sandbox::bounded_output::file_tail(
            Path::new(&log),
            sandbox::bounded_output::STDERR_TAIL,
        )
        .map(|t| String::from_utf8_lossy(t.bytes()).into_owned())
        .unwrap_or_default();
        let tail: String = log_text
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join(" | ");
        anyhow::bail!(
            "{} {} failed ({status}): {tail}",
            self.runtime,
            rest.first().unwrap_or(&"")
        )
    }

    /// Starts the container's init detached: it outlives Garrison.
    pub(crate) async fn run_detached(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
    ) -> anyhow::Result<()> {
        let log = bundle.join("runc.log");
        let bundle = bundle.to_string_lossy();
        let pid_file = pid_file.to_string_lossy();
        self.call_detached(
            &log,
            &[
                "run",
                "--detach",
                "--bundle",
                &bundle,
                "--pid-file",
                &pid_file,
                id,
            ],
        )
        .await
        .with_context(|| format!("starting container {id}"))?;
        adopt_recorded(Path::new(pid_file.as_ref()));
        if let Some(gofer) = self.gofer_pid(id) {
            reaper::adopt(gofer);
        }
        Ok(())
    }

    /// runsc's gofer (the process that serves the sandbox's files) of
    /// container `id`, from runsc's state file: like the init, it is left
    /// to Garrison, the subreaper, and must be reaped when it ends.
    fn gofer_pid(&self, id: &str) -> Option<u32> {
        if self.runtime != Runtime::Runsc {
            return None;
        }
        #[derive(Deserialize)]
        struct RunscState {
            #[serde(rename = "goferPid")]
            gofer_pid: u32,
        }
        let path = self.state_root.join(format!("{id}_sandbox:{id}.state"));
        let state: RunscState = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        (state.gofer_pid > 1).then_some(state.gofer_pid)
    }

    /// The host processes of container `id` that end with its init (`init`)
    /// and are then Garrison's to reap, as the subreaper: none under runc;
    /// under runsc the gofer and the ptrace platform's stub processes (one
    /// per address space in the sandbox, in its cgroup).
    fn companions(&self, id: &str, init: u32) -> Vec<u32> {
        if self.runtime != Runtime::Runsc {
            return Vec::new();
        }
        let cgroup = cgroups_path(id);
        let mut pids: Vec<u32> = [
            format!("/sys/fs/cgroup/pids{cgroup}/cgroup.procs"),
            format!("/sys/fs/cgroup{cgroup}/cgroup.procs"),
        ]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter(|pid| *pid != init)
        .collect();
        pids.extend(self.gofer_pid(id));
        pids
    }

    /// Starts a process in the container, detached; returns when it runs.
    /// Its pid is in `pid_file`; Garrison reaps it when it ends.
    pub(crate) async fn exec_detached(
        &self,
        id: &str,
        log: &Path,
        pid_file: &Path,
        cwd: &str,
        argv: &[&str],
    ) -> anyhow::Result<()> {
        let pid_file = pid_file.to_string_lossy();
        let mut rest = vec![
            "exec",
            "--detach",
            "--pid-file",
            &pid_file,
            "--cwd",
            cwd,
            id,
        ];
        rest.extend_from_slice(argv);
        self.call_detached(log, &rest)
            .await
            .with_context(|| format!("starting a process in {id}"))?;
        adopt_recorded(Path::new(pid_file.as_ref()));
        Ok(())
    }

    /// Runs `argv` in the container and waits for it to end.
    ///
    /// The program is the sandbox's own file, which the sandbox can replace:
    /// its output is not read, and after [`EXEC_WAIT_GUARD`] it is given up
    /// on (its `exec` killed), so it can neither flood nor hang the host.
    pub(crate) async fn exec_wait(&self, id: &str, argv: &[&str]) -> anyhow::Result<()> {
        let mut rest = vec!["exec", id];
        rest.extend_from_slice(argv);
        let mut child = tokio::process::Command::new(&self.binary)
            .args(self.args(&rest))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("running {}", self.binary.display()))?;
        match tokio::time::timeout(EXEC_WAIT_GUARD, child.wait()).await {
            Ok(status) => {
                let status = status?;
                anyhow::ensure!(
                    status.success(),
                    "{:?} in {id} failed ({status})",
                    argv.first()
                );
                Ok(())
            }
            Err(_) => {
                let _ = child.kill().await;
                anyhow::bail!(
                    "{:?} in {id} did not finish within {EXEC_WAIT_GUARD:?}",
                    argv.first()
                )
            }
        }
    }

    pub(crate) async fn state(&self, id: &str) -> Option<State> {
        let out = self.call(&["state", id]).await.ok()?;
        serde_json::from_slice(&out).ok()
    }

    /// Whether the container exists and runs (not paused, not stopped).
    pub(crate) async fn is_running(&self, id: &str) -> bool {
        self.state(id).await.is_some_and(|s| s.status == "running")
    }

    pub(crate) async fn pause(&self, id: &str) -> anyhow::Result<()> {
        self.call(&["pause", id]).await.map(drop)
    }

    pub(crate) async fn resume(&self, id: &str) -> anyhow::Result<()> {
        self.call(&["resume", id]).await.map(drop)
    }

    /// Kills every process and removes the container; gone is success.
    ///
    /// `init_pid` is the container's init as `run_detached` recorded it.
    /// runc's own `delete --force` checks every 100 ms whether the init has
    /// died; waiting for it here, on a pidfd, ends that wait the moment it
    /// dies, and `runc delete` then finds a stopped container.
    pub(crate) async fn delete(&self, id: &str, init_pid: Option<u32>) -> anyhow::Result<()> {
        let cgroup = cgroups_path(id);
        let init = init_pid.and_then(reaper::pidfd).filter(|_| {
            let pid = init_pid.unwrap_or_default();
            std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|text| in_cgroup(&text, &cgroup))
        });
        if let Some(init) = init {
            let companions = self.companions(id, init_pid.unwrap_or_default());
            // Those that die after the runtime removed the cgroup are known
            // by their session (see `reaper::sweep`).
            reaper::remember_sessions(&companions);
            let companions: Vec<_> = companions.into_iter().filter_map(reaper::pidfd).collect();
            // Through the runtime, which also thaws a paused container (a frozen
            // process dies only once thawed).
            let _ = self.call(&["kill", id, "KILL"]).await;
            // Reaped here rather than by the reaper's thread a moment later,
            // so nothing of the container is left once destroy returns. The
            // init first: its death hands its children to Garrison.
            let _ = tokio::task::spawn_blocking(move || {
                if reaper::wait_exit(&init, DEATH_GUARD) {
                    reaper::reap(&init);
                }
                for process in &companions {
                    if reaper::wait_exit(process, DEATH_GUARD) {
                        reaper::reap(process);
                    }
                }
            })
            .await;
        } else {
            // The init is gone already: under runsc a fork bomb ends the
            // Sentry at the task limit, and its hundreds of stubs (each
            // leading a session of its own) fall to Garrison. Those that
            // ended are reaped now, while the cgroup still names them as
            // the sandbox's, and the sessions of the rest remembered: once
            // the runtime removed the cgroup, a stub's reads as the root and
            // nothing else tells it is the sandbox's (seen once in a
            // whole-suite run on a loaded machine: 292 zombies left).
            reaper::remember_sessions(&self.companions(id, 0));
            let _ = tokio::task::spawn_blocking(reaper::sweep).await;
        }
        let args = self.args(&["delete", "--force", id]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut retries = 0;
        let deleted = loop {
            match run(&self.binary.to_string_lossy(), &refs, &[]).await {
                Ok(()) => break Ok(()),
                Err(_) if self.state(id).await.is_none() => break Ok(()),
                // After a fork bomb the init cannot finish dying until every
                // process of its pid namespace is reaped, and runc gives up
                // with "container init still running" meanwhile: reap what
                // has reached Garrison and ask again, a bounded number of times.
                Err(_) if retries < DELETE_RETRIES => {
                    retries += 1;
                    let _ = tokio::task::spawn_blocking(reaper::sweep).await;
                    tokio::time::sleep(DELETE_RETRY_PAUSE).await;
                }
                Err(e) => break Err(e.context(format!("deleting container {id}"))),
            }
        };
        // What ended before the kill (runsc's stubs, when a fork bomb ended
        // the Sentry) was never in `companions`: the reaper's thread sweeps
        // it on SIGCHLD, and this sweep makes sure none is left once
        // destroy returns.
        let _ = tokio::task::spawn_blocking(reaper::sweep).await;
        deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_parse_print_and_get_their_flags() {
        for runtime in Runtime::ALL {
            assert_eq!(runtime.as_str().parse::<Runtime>(), Ok(runtime));
            assert_eq!(runtime.to_string(), runtime.as_str());
        }
        assert!("gvisor".parse::<Runtime>().unwrap_err().contains("gvisor"));
        let runsc = Runc {
            runtime: Runtime::Runsc,
            binary: "/usr/bin/runsc".into(),
            state_root: "/state/runsc".into(),
        };
        let args = runsc.args(&["state", "sb"]);
        assert_eq!(args[..2], ["--root", "/state/runsc"]);
        // Writes reach the disk on the host, which reads and snapshots them.
        for flag in ["--overlay2=none", "--file-access=shared", "--network=host"] {
            assert!(args.iter().any(|a| a == flag), "{flag}: {args:?}");
        }
        assert_eq!(args[args.len() - 2..], ["state", "sb"]);
        let runc = Runc {
            runtime: Runtime::Runc,
            ..runsc
        };
        assert_eq!(
            runc.args(&["state", "sb"]),
            ["--root", "/state/runsc", "state", "sb"]
        );
    }

    #[test]
    fn cgroup_membership_is_an_exact_path_in_any_hierarchy() {
        let v1 = "12:pids:/garrison/sb-1\n3:cpu,cpuacct:/garrison/sb-1\n0::/\n";
        assert!(in_cgroup(v1, "/garrison/sb-1"));
        assert!(!in_cgroup(v1, "/garrison/sb"));
        assert!(in_cgroup("0::/garrison/sb-1\n", "/garrison/sb-1"));
        assert!(!in_cgroup("0::/garrison/sb-10\n", "/garrison/sb-1"));
        assert!(!in_cgroup("", "/garrison/sb-1"));
    }
}
