//! What this machine needs for the local backend: its runtime, the
//! kernel's features, the static shim, the default image. `garrison doctor`
//! shows the list (through the plug-in's `prerequisites`) and `garrison
//! demo` picks its backend by it, so the two never disagree about what
//! "supported" means.

use std::path::{Path, PathBuf};

use sandbox::plugin::doctor::Check;

use crate::Runtime;
use crate::images::{DEFAULT_IMAGE, ImageStore};

/// Where the local backend takes runc and tini from (`LocalConfig::for_state_dir`).
const RUNC: &str = "/usr/sbin/runc";
const TINI: &str = "/usr/bin/tini-static";

/// Directories searched for the helper programs besides `PATH`: root's
/// tools live in the sbin directories, which a plain user's `PATH` lacks.
const SBIN_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// Everything the `local` backend needs on `runtime`, one check each, in
/// the order a user would fix them.
pub fn prerequisites(state_dir: &Path, runtime: Runtime) -> Vec<Check> {
    let mut checks = vec![root()];
    match runtime {
        Runtime::Runc => {
            checks.push(file_check("runc", Path::new(RUNC), "apt-get install runc"));
            checks.extend(isolation(Path::new(RUNC)));
            checks.push(user_namespaces(state_dir));
        }
        Runtime::Runsc => checks.extend(runsc(&runtime.default_binary())),
    }
    let binary = match runtime {
        Runtime::Runc => PathBuf::from(RUNC),
        Runtime::Runsc => runtime.default_binary(),
    };
    checks.push(crate::memory_suspend::doctor_check(
        runtime,
        version_line(&binary).as_deref(),
    ));
    checks.push(file_check(
        "tini-static",
        Path::new(TINI),
        "apt-get install tini",
    ));
    checks.push(static_shim());
    for (tool, package) in [
        ("mkfs.ext4", "e2fsprogs"),
        ("mount", "mount"),
        ("losetup", "mount"),
        ("nft", "nftables"),
        ("ip", "iproute2"),
    ] {
        checks.push(match find_program(tool) {
            Some(path) => Check::pass(tool, path.display().to_string()),
            None => Check::fail(
                tool,
                "not found",
                format!("apt-get install {package} (scripts/setup installs it)"),
            ),
        });
    }
    checks.push(overlayfs());
    checks.push(cgroups());
    checks.push(file_check(
        "loop devices",
        Path::new("/dev/loop-control"),
        "load the loop module (modprobe loop); in a container, run it privileged",
    ));
    checks.push(default_image(state_dir));
    checks
}

/// The first line of `binary --version`, if it runs and succeeds.
fn version_line(binary: &Path) -> Option<String> {
    sandbox::bounded_output::output_blocking(std::process::Command::new(binary).arg("--version"))
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.lines().next().map(str::to_owned))
}

/// What isolates a local sandbox: the runtime, its seccomp support (the
/// filter is part of every container's configuration, so a runc without it
/// cannot start one), and whether user namespaces are in use.
fn isolation(runc: &Path) -> Vec<Check> {
    let Some(version) = version_line(runc) else {
        return Vec::new();
    };
    let features =
        sandbox::bounded_output::output_blocking(std::process::Command::new(runc).arg("features"))
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok());
    vec![
        Check::info(
            "runtime",
            format!("{version}: namespaces, cgroups, dropped capabilities, no_new_privileges"),
        ),
        seccomp_check(features.as_ref()),
    ]
}

/// Whether sandboxes can run in user namespaces here (they do unless
/// `SANDBOX_USERNS=false`): the probe makes one and an idmapped mount on the
/// state directory's file system.
fn user_namespaces(state_dir: &Path) -> Check {
    let name = "user namespaces";
    let off = std::env::var(crate::USERNS_ENV).is_ok_and(|v| matches!(v.trim(), "false" | "0"));
    if off {
        return Check::warn(
            name,
            "turned off (SANDBOX_USERNS=false): a sandbox's root is root on this host, \
             held in by capabilities, seccomp and the namespaces",
            "unset SANDBOX_USERNS unless this machine cannot run them (SECURITY.md)",
        );
    }
    // Probed on the file system the state directory is (or will be) on,
    // without making it: doctor only looks.
    let Some(existing) = state_dir.ancestors().find(|dir| dir.is_dir()) else {
        return Check::info(
            name,
            "not probed: no directory on the state directory's path",
        );
    };
    match crate::userns::probe(existing) {
        Ok(()) => Check::pass(
            name,
            format!(
                "active: a sandbox's root is an unprivileged host uid (from {}, {} ids per sandbox), \
                 its image and layer shown through idmapped mounts",
                crate::userns::FIRST_HOST_ID,
                crate::userns::IDS
            ),
        ),
        Err(e) => Check::fail(
            name,
            format!("{e:#}"),
            "use a kernel of 5.19 or newer and a state directory on ext4, xfs, btrfs or tmpfs; \
             or set SANDBOX_USERNS=false (SECURITY.md says what that gives up)",
        ),
    }
}

/// gVisor as the runtime (`SANDBOX_RUNTIME=runsc`): installed, and able to
/// start a sandbox here (a one-off `runsc do true` on the ptrace platform,
/// as root; a kernel or container that refuses ptrace stops it).
fn runsc(binary: &Path) -> Vec<Check> {
    vec![
        Check::info(
            "runtime",
            "runsc (SANDBOX_RUNTIME): gVisor serves the sandbox's system calls in user space, \
             ptrace platform; slower system calls (SECURITY.md)",
        ),
        runsc_usable(binary),
        Check::info(
            "seccomp",
            "gVisor's own filter confines the Sentry on the host; the sandboxes' profile \
             applies to each container's init inside it (--oci-seccomp)",
        ),
        Check::info(
            "user namespaces",
            "not used under runsc: gVisor's kernel keeps ids of its own, and the Sentry runs \
             in namespaces of its own (SANDBOX_USERNS applies to runc)",
        ),
    ]
}

/// Whether runsc is installed and, as root, starts a sandbox here.
fn runsc_usable(binary: &Path) -> Check {
    let Some(version) = version_line(binary) else {
        return Check::fail(
            "runsc",
            format!("{} not found or not working", binary.display()),
            "apt-get install runsc (scripts/setup installs it), or SANDBOX_RUNTIME=runc",
        );
    };
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Check::warn(
            "runsc",
            format!("{version}; not tried (starting a sandbox needs root)"),
            "run garrison doctor as root",
        );
    }
    let tried = tempfile::tempdir().ok().and_then(|root| {
        sandbox::bounded_output::output_blocking(
            std::process::Command::new(binary)
                .arg("--root")
                .arg(root.path())
                .args(["--platform=ptrace", "--network=none", "do", "/bin/true"]),
        )
        .ok()
    });
    match tried {
        Some(out) if out.status.success() => {
            Check::pass("runsc", format!("{version}; started a sandbox here"))
        }
        Some(out) => Check::fail(
            "runsc",
            format!(
                "{version} cannot start a sandbox here: {}",
                out.stderr_text()
                    .trim()
                    .chars()
                    .take(300)
                    .collect::<String>()
            ),
            "gVisor needs ptrace and cgroups (in a container: privileged); or SANDBOX_RUNTIME=runc",
        ),
        None => Check::fail(
            "runsc",
            format!("{version}: could not be run"),
            "check that root can run it",
        ),
    }
}

/// Whether runc can apply the sandboxes' seccomp filter, from `runc features`.
pub fn seccomp_check(features: Option<&serde_json::Value>) -> Check {
    match features.map(|f| &f["linux"]["seccomp"]["enabled"]) {
        Some(serde_json::Value::Bool(true)) => Check::pass(
            "seccomp",
            "active: every sandbox refuses namespaces, mounting, keyrings, bpf, io_uring and the rest of Docker's default refusals",
        ),
        Some(serde_json::Value::Bool(false)) => Check::fail(
            "seccomp",
            "this runc was built without seccomp, so no sandbox can start",
            "install Debian's runc (apt-get install runc), which has it",
        ),
        _ => Check::warn(
            "seccomp",
            "runc does not say whether it supports seccomp (`runc features` failed)",
            "use runc 1.1 or newer (apt-get install runc)",
        ),
    }
}

fn root() -> Check {
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 {
        Check::pass("root", "running as root")
    } else {
        Check::fail(
            "root",
            format!("running as uid {euid}"),
            "run garrison as root: the local backend mounts filesystems and manages containers",
        )
    }
}

fn file_check(name: &str, path: &Path, remedy: &str) -> Check {
    if path.exists() {
        Check::pass(name, path.display().to_string())
    } else {
        Check::fail(
            name,
            format!("{} not found", path.display()),
            format!("{remedy} (scripts/setup does this)"),
        )
    }
}

/// The static process supervisor copied into every container; found where
/// `garrison serve` looks for it.
fn static_shim() -> Check {
    let path = static_shim_path();
    file_check(
        "garrison-shim",
        &path,
        "build the static shim next to garrison, or set GARRISON_STATIC_SHIM",
    )
}

/// `$GARRISON_STATIC_SHIM`, else `garrison-shim` beside this binary (as
/// the local backend's plug-in resolves it).
pub fn static_shim_path() -> PathBuf {
    if let Some(path) = std::env::var_os(crate::STATIC_SHIM_ENV) {
        return PathBuf::from(path);
    }
    std::env::current_exe()
        .map(|exe| exe.with_file_name("garrison-shim"))
        .unwrap_or_else(|_| PathBuf::from("garrison-shim"))
}

/// Finds `name` on `PATH` or in the sbin directories.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn overlayfs() -> Check {
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"))
    {
        Check::pass("overlayfs", "in /proc/filesystems")
    } else {
        Check::fail(
            "overlayfs",
            "not in /proc/filesystems",
            "load it with `modprobe overlay` (a kernel with overlayfs is required)",
        )
    }
}

/// The cgroup controllers the local backend sets limits with.
const CONTROLLERS: &[&str] = &["memory", "cpu", "pids"];

fn cgroups() -> Check {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").ok();
    let missing: Vec<&str> = match &v2 {
        Some(list) => {
            let have: Vec<&str> = list.split_whitespace().collect();
            CONTROLLERS
                .iter()
                .copied()
                .filter(|c| !have.contains(c))
                .collect()
        }
        // cgroup v1: one hierarchy per controller.
        None => CONTROLLERS
            .iter()
            .copied()
            .filter(|c| !Path::new("/sys/fs/cgroup").join(c).exists())
            .collect(),
    };
    let version = if v2.is_some() { "v2" } else { "v1" };
    if missing.is_empty() {
        Check::pass(
            "cgroups",
            format!("{version}, controllers {}", CONTROLLERS.join(", ")),
        )
    } else {
        Check::fail(
            "cgroups",
            format!("{version}, missing controllers: {}", missing.join(", ")),
            "mount the cgroup filesystem with the memory, cpu and pids controllers enabled",
        )
    }
}

/// The `default` image, looked up without creating anything: an absent
/// store is reported, never made.
pub fn default_image(state_dir: &Path) -> Check {
    let name = format!("image {DEFAULT_IMAGE:?}");
    let images = state_dir.join("images");
    let remedy = format!(
        "garrison image build {DEFAULT_IMAGE} --state-dir {}",
        state_dir.display()
    );
    if !images.join("names").join(DEFAULT_IMAGE).exists() {
        return Check::fail(name, format!("not in {}", images.display()), remedy);
    }
    match ImageStore::open(&images).and_then(|store| store.resolve(DEFAULT_IMAGE)) {
        Ok(image) => Check::pass(
            name,
            format!(
                "{} ({} MiB)",
                crate::images::names::short_id(&image.id),
                image.size_bytes >> 20
            ),
        ),
        Err(e) => Check::fail(name, format!("unusable: {e:#}"), remedy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::plugin::doctor::Outcome;

    #[test]
    fn with_runsc_chosen_it_is_checked_and_tried_instead_of_runc() {
        let state = tempfile::tempdir().unwrap();
        let checks = prerequisites(state.path(), Runtime::Runsc);
        let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
        assert!(
            names.contains(&"runsc") && !names.contains(&"runc"),
            "{names:?}"
        );
        let runtime = checks.iter().find(|c| c.name == "runtime").unwrap();
        assert!(runtime.detail.contains("runsc"), "{}", runtime.detail);
        for isolation in ["seccomp", "user namespaces"] {
            assert!(names.contains(&isolation), "{names:?}");
        }
        // Whether a suspend keeps the processes, and why not.
        let memory = checks.iter().find(|c| c.name == "memory suspend").unwrap();
        assert!(memory.detail.contains("hostinet"), "{}", memory.detail);
        // Where it can run (root, Debian's runsc installed), it must.
        // SAFETY: geteuid(2) has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root && Runtime::Runsc.default_binary().exists() {
            let runsc = checks.iter().find(|c| c.name == "runsc").unwrap();
            assert_eq!(runsc.outcome, Outcome::Pass, "{}", runsc.detail);
        }
    }

    #[test]
    fn with_runc_memory_suspend_is_said_to_need_criu() {
        let state = tempfile::tempdir().unwrap();
        let checks = prerequisites(state.path(), Runtime::Runc);
        let memory = checks.iter().find(|c| c.name == "memory suspend").unwrap();
        assert!(memory.detail.starts_with("no"), "{}", memory.detail);
        assert!(memory.detail.contains("CRIU"), "{}", memory.detail);
    }

    #[test]
    fn a_missing_image_is_reported_without_creating_the_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let check = default_image(dir.path());
        assert!(!check.passed());
        assert!(
            check
                .remedy
                .as_deref()
                .unwrap_or("")
                .contains("image build")
        );
        assert!(!dir.path().join("images").exists());
    }

    #[test]
    fn seccomp_support_is_read_from_runc_features() {
        let on = serde_json::json!({"linux": {"seccomp": {"enabled": true}}});
        let off = serde_json::json!({"linux": {"seccomp": {"enabled": false}}});
        assert!(seccomp_check(Some(&on)).passed());
        assert!(seccomp_check(Some(&off)).is_blocking());
        assert!(!seccomp_check(None).is_blocking());
        assert!(!seccomp_check(None).passed());
    }

    #[test]
    fn programs_are_found_on_path() {
        assert!(find_program("sh").is_some());
        assert!(find_program("no-such-program-garrison").is_none());
    }
}
