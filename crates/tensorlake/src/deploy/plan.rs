//! The pure part of `garrison deploy tensorlake`: what to do with the
//! sandbox and the serve process as found, where things go inside the
//! sandbox, and the command line and environment the inner `garrison serve`
//! starts with.

use std::collections::BTreeMap;

use sandbox::plugin::deploy::DeployRequest;

use crate::TensorlakeSettings;
use crate::models::{ProcessInfo, ProcessState, SandboxStatus};
use crate::settings as tl;

/// Managed process names are `garrison-serve-<generation>`: a new
/// generation each time the process is started, so that a name is never
/// reused (whether the daemon lets an exited process's name be taken again
/// is not published).
pub(crate) const PROCESS_PREFIX: &str = "garrison-serve-";

/// The deployment's default sandbox name.
pub(crate) const DEFAULT_NAME: &str = "garrison-orchestrator";

/// What the sandbox needs, as found by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SandboxStep {
    /// None by that name (or only a terminated one): create it.
    Create,
    /// Suspended (by Tensorlake for idleness, or by hand): resume it.
    Resume,
    /// Pending, suspending or snapshotting: wait and look again.
    Wait,
    /// Running.
    Ready,
}

pub(crate) fn sandbox_step(status: Option<&SandboxStatus>) -> SandboxStep {
    match status {
        None => SandboxStep::Create,
        Some(s) if s.is_final() => SandboxStep::Create,
        Some(SandboxStatus::Running) => SandboxStep::Ready,
        Some(SandboxStatus::Suspended) => SandboxStep::Resume,
        Some(_) => SandboxStep::Wait,
    }
}

/// The generation of a serve process's managed name, `None` for other
/// processes.
pub(crate) fn generation(info: &ProcessInfo) -> Option<u32> {
    let name = info.managed.as_ref()?.name.as_deref()?;
    let digits = name.strip_prefix(PROCESS_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The serve process of the highest generation.
pub(crate) fn newest_serve(processes: &[ProcessInfo]) -> Option<&ProcessInfo> {
    processes
        .iter()
        .filter_map(|p| generation(p).map(|g| (g, p)))
        .max_by_key(|(g, _)| *g)
        .map(|(_, p)| p)
}

/// What the serve process needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ProcessStep {
    /// It runs: leave it.
    Keep { name: String, pid: i64 },
    /// None runs: start one under this name.
    Start { name: String },
}

pub(crate) fn process_step(processes: &[ProcessInfo]) -> ProcessStep {
    let newest = newest_serve(processes);
    if let Some(p) = newest
        && p.status == ProcessState::Running
    {
        return ProcessStep::Keep {
            name: process_name(generation(p).unwrap_or(0)),
            pid: p.pid,
        };
    }
    let next = newest
        .and_then(generation)
        .map_or(1, |g| g.saturating_add(1));
    ProcessStep::Start {
        name: process_name(next),
    }
}

pub(crate) fn process_name(generation: u32) -> String {
    format!("{PROCESS_PREFIX}{generation}")
}

/// Tensorlake's sandbox names: DNS labels (lowercase letters, digits and
/// hyphens, 1 to 63, not starting or ending with a hyphen).
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-';
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--name {name:?}: a sandbox name is 1-63 lowercase letters, digits and hyphens, \
             not starting or ending with a hyphen"
        ))
    }
}

/// Where the deployment keeps its files in the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// `<TENSORLAKE_SANDBOX_ROOT>/deploy`.
    pub(crate) dir: String,
}

impl Layout {
    /// `sandbox_root` is the backend's setting, `{id}` standing for the
    /// sandbox id (the mock keeps every sandbox in a host directory).
    pub(crate) fn new(sandbox_root: &str, sandbox_id: &str) -> Self {
        let root = sandbox_root
            .replace(crate::backend::ID_PLACEHOLDER, sandbox_id)
            .trim_end_matches('/')
            .to_owned();
        Self {
            dir: format!("{root}/deploy"),
        }
    }

    pub(crate) fn binary(&self) -> String {
        format!("{}/bin/garrison", self.dir)
    }

    pub(crate) fn state_dir(&self) -> String {
        format!("{}/state", self.dir)
    }

    pub(crate) fn home(&self) -> String {
        format!("{}/home", self.dir)
    }

    /// `GARRISON_CONFIG` of the inner serve: holds only the shipped
    /// settings file, never a credentials file.
    pub(crate) fn config_dir(&self) -> String {
        format!("{}/config", self.dir)
    }

    pub(crate) fn config_file(&self) -> String {
        format!("{}/garrison.toml", self.config_dir())
    }

    /// Every directory to create before the files go in.
    pub(crate) fn dirs(&self) -> Vec<String> {
        vec![
            format!("{}/bin", self.dir),
            self.state_dir(),
            self.home(),
            self.config_dir(),
        ]
    }
}

/// The inner serve's command line: no secret is ever in it.
pub(crate) fn serve_argv(layout: &Layout, has_config: bool, forwarded: &[String]) -> Vec<String> {
    let mut argv = vec![
        "serve".to_owned(),
        "--backend".to_owned(),
        "tensorlake".to_owned(),
        "--state-dir".to_owned(),
        layout.state_dir(),
    ];
    if has_config {
        argv.push("--config".to_owned());
        argv.push(layout.config_file());
    }
    argv.extend(forwarded.iter().cloned());
    argv
}

/// The inner serve's environment: what every deployed serve gets (the
/// Devin token, `GIT_TOKEN` if set, the serve variables set on the host:
/// [`DeployRequest::serve_env`]), the Tensorlake key and settings, and its
/// paths. Only this map holds the secrets: the process API takes it at
/// start, so they are in no image and no argv.
pub(crate) fn serve_env(
    tensorlake: &TensorlakeSettings,
    request: &DeployRequest,
    layout: &Layout,
) -> BTreeMap<String, String> {
    let mut env = request.serve_env.clone();
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_owned(), v.to_owned());
    };
    if let Some(id) = &request.acceptor_id {
        set("DEVIN_WORKER_ACCEPTOR_ID", id);
    }
    set(tl::API_KEY_ENV, tensorlake.api_key.expose());
    set(tl::API_URL_ENV, &tensorlake.api_url);
    set(tl::TIMEOUT_SECS_ENV, &tensorlake.timeout_secs.to_string());
    set(tl::SANDBOX_ROOT_ENV, &tensorlake.sandbox_root);
    if let Some(image) = &tensorlake.image {
        set(tl::IMAGE_ENV, image);
    }
    set("GARRISON_CONFIG", &layout.config_dir());
    set("HOME", &layout.home());
    set(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(name: Option<&str>, status: &str, pid: i64) -> ProcessInfo {
        serde_json::from_value(serde_json::json!({
            "pid": pid,
            "status": status,
            "managed": name.map(|n| serde_json::json!({"id": n, "name": n})),
        }))
        .unwrap()
    }

    #[test]
    fn sandbox_steps() {
        assert_eq!(sandbox_step(None), SandboxStep::Create);
        assert_eq!(
            sandbox_step(Some(&SandboxStatus::Terminated)),
            SandboxStep::Create
        );
        assert_eq!(
            sandbox_step(Some(&SandboxStatus::Running)),
            SandboxStep::Ready
        );
        assert_eq!(
            sandbox_step(Some(&SandboxStatus::Suspended)),
            SandboxStep::Resume
        );
        for s in ["pending", "suspending", "snapshotting", "migrating"] {
            assert_eq!(
                sandbox_step(Some(&SandboxStatus::from(s))),
                SandboxStep::Wait
            );
        }
    }

    #[test]
    fn a_running_serve_is_kept_and_an_exited_one_replaced_by_a_new_generation() {
        assert_eq!(
            process_step(&[]),
            ProcessStep::Start {
                name: "garrison-serve-1".into()
            }
        );
        let running = [
            proc(Some("garrison-serve-1"), "exited", 10),
            proc(Some("garrison-serve-2"), "running", 11),
            proc(None, "running", 12),
            proc(Some("other"), "running", 13),
        ];
        assert_eq!(
            process_step(&running),
            ProcessStep::Keep {
                name: "garrison-serve-2".into(),
                pid: 11
            }
        );
        let exited = [
            proc(Some("garrison-serve-9"), "signaled", 10),
            proc(Some("garrison-serve-10"), "exited", 11),
            proc(Some("garrison-serve-x"), "running", 12),
        ];
        assert_eq!(
            process_step(&exited),
            ProcessStep::Start {
                name: "garrison-serve-11".into()
            }
        );
    }

    #[test]
    fn names_follow_tensorlake_rules() {
        assert!(check_name(DEFAULT_NAME).is_ok());
        for bad in ["", "-a", "a-", "Garrison", "a_b", &"a".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn layout_fills_in_the_sandbox_id() {
        let layout = Layout::new("/tmp/mock/sandboxes/{id}/", "abc");
        assert_eq!(
            layout.binary(),
            "/tmp/mock/sandboxes/abc/deploy/bin/garrison"
        );
        assert_eq!(
            Layout::new("/garrison", "abc").state_dir(),
            "/garrison/deploy/state"
        );
    }

    #[test]
    fn forwarded_args_may_not_set_what_deploy_sets_or_carry_a_token() {
        // What may be forwarded is checked by the CLI; the inner serve's
        // command line puts the forwarded options after deploy's own.
        let argv = serve_argv(&Layout::new("/g", "i"), true, &["--drain".into()]);
        assert_eq!(
            argv,
            [
                "serve",
                "--backend",
                "tensorlake",
                "--state-dir",
                "/g/deploy/state",
                "--config",
                "/g/deploy/config/garrison.toml",
                "--drain"
            ]
        );
    }

    #[test]
    fn the_environment_carries_the_credentials_and_settings_but_no_host_paths() {
        let host = common::settings::MapSource::vars(&[
            ("TENSORLAKE_API_KEY", "tl_secret_key"),
            ("TENSORLAKE_IMAGE", "garrison-session"),
        ]);
        let settings = crate::settings::resolve(&host).unwrap();
        let request = DeployRequest {
            name: "g".into(),
            image: None,
            cpus: 1.0,
            memory_mb: 2048,
            disk_mb: Some(10240),
            timeout_secs: 86_400,
            binary: None,
            config_file: None,
            serve_args: Vec::new(),
            serve_env: BTreeMap::from([(
                "DEVIN_OUTPOSTS_TOKEN".to_owned(),
                "cog_secret_token".to_owned(),
            )]),
            acceptor_id: None,
            state_dir: "/var/lib/here".into(),
        };
        let layout = Layout::new("/garrison", "sb1");
        let env = serve_env(&settings, &request, &layout);
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("DEVIN_OUTPOSTS_TOKEN"), Some("cog_secret_token"));
        assert_eq!(get("TENSORLAKE_API_KEY"), Some("tl_secret_key"));
        assert_eq!(get("TENSORLAKE_IMAGE"), Some("garrison-session"));
        assert_eq!(get("SANDBOX_TIMEOUT_SECS"), Some("1800"));
        assert_eq!(get("GARRISON_CONFIG"), Some("/garrison/deploy/config"));
        assert_eq!(get("HOME"), Some("/garrison/deploy/home"));
        assert_eq!(get("DEVIN_WORKER_ACCEPTOR_ID"), None);
        for absent in ["GARRISON_HOME", "GARRISON_SNAPSHOT_DIR", "GARRISON_BACKEND"] {
            assert_eq!(get(absent), None, "{absent}");
        }
        let argv = serve_argv(&layout, false, &[]).join(" ");
        for secret in ["cog_secret_token", "tl_secret_key"] {
            assert!(!argv.contains(secret));
        }
    }
}
