//! The pure part of `garrison deploy tensorlake`: what to do with the
//! sandbox and the serve process as found, where things go inside the
//! sandbox, and the command line and environment the inner `garrison serve`
//! starts with.

use std::collections::BTreeMap;

use orchestrator::settings::ServeConfig;
use orchestrator::settings::names;
use sandbox::plugin::BackendPlugin;
use tensorlake::models::{ProcessInfo, ProcessState, SandboxStatus};
use tensorlake::settings as tl;

/// Managed process names are `garrison-serve-<generation>`: a new
/// generation each time the process is started, so that a name is never
/// reused (whether the daemon lets an exited process's name be taken again
/// is not published).
pub(super) const PROCESS_PREFIX: &str = "garrison-serve-";

/// The deployment's default sandbox name.
pub(super) const DEFAULT_NAME: &str = "garrison-orchestrator";

/// What the sandbox needs, as found by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SandboxStep {
    /// None by that name (or only a terminated one): create it.
    Create,
    /// Suspended (by Tensorlake for idleness, or by hand): resume it.
    Resume,
    /// Pending, suspending or snapshotting: wait and look again.
    Wait,
    /// Running.
    Ready,
}

pub(super) fn sandbox_step(status: Option<&SandboxStatus>) -> SandboxStep {
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
pub(super) fn generation(info: &ProcessInfo) -> Option<u32> {
    let name = info.managed.as_ref()?.name.as_deref()?;
    let digits = name.strip_prefix(PROCESS_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The serve process of the highest generation.
pub(super) fn newest_serve(processes: &[ProcessInfo]) -> Option<&ProcessInfo> {
    processes
        .iter()
        .filter_map(|p| generation(p).map(|g| (g, p)))
        .max_by_key(|(g, _)| *g)
        .map(|(_, p)| p)
}

/// What the serve process needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ProcessStep {
    /// It runs: leave it.
    Keep { name: String, pid: i64 },
    /// None runs: start one under this name.
    Start { name: String },
}

pub(super) fn process_step(processes: &[ProcessInfo]) -> ProcessStep {
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

pub(super) fn process_name(generation: u32) -> String {
    format!("{PROCESS_PREFIX}{generation}")
}

/// Tensorlake's sandbox names: DNS labels (lowercase letters, digits and
/// hyphens, 1 to 63, not starting or ending with a hyphen).
pub(super) fn check_name(name: &str) -> Result<(), String> {
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
pub(super) struct Layout {
    /// `<TENSORLAKE_SANDBOX_ROOT>/deploy`.
    pub dir: String,
}

impl Layout {
    /// `sandbox_root` is the backend's setting, `{id}` standing for the
    /// sandbox id (the mock keeps every sandbox in a host directory).
    pub(super) fn new(sandbox_root: &str, sandbox_id: &str) -> Self {
        let root = sandbox_root
            .replace(tensorlake::backend::ID_PLACEHOLDER, sandbox_id)
            .trim_end_matches('/')
            .to_owned();
        Self {
            dir: format!("{root}/deploy"),
        }
    }

    pub(super) fn binary(&self) -> String {
        format!("{}/bin/garrison", self.dir)
    }

    pub(super) fn state_dir(&self) -> String {
        format!("{}/state", self.dir)
    }

    pub(super) fn home(&self) -> String {
        format!("{}/home", self.dir)
    }

    /// `GARRISON_CONFIG` of the inner serve: holds only the shipped
    /// settings file, never a credentials file.
    pub(super) fn config_dir(&self) -> String {
        format!("{}/config", self.dir)
    }

    pub(super) fn config_file(&self) -> String {
        format!("{}/garrison.toml", self.config_dir())
    }

    /// Every directory to create before the files go in.
    pub(super) fn dirs(&self) -> Vec<String> {
        vec![
            format!("{}/bin", self.dir),
            self.state_dir(),
            self.home(),
            self.config_dir(),
        ]
    }
}

/// Serve flags `deploy` sets itself (or that name host paths) and so
/// refuses among the forwarded ones.
const OWN_FLAGS: &[&str] = &["--backend", "--state-dir", "--snapshot-dir", "--config"];

/// Refuses forwarded serve arguments that `deploy` sets itself, and any
/// that look like a secret.
pub(super) fn check_serve_args(args: &[String]) -> Result<(), String> {
    for arg in args {
        let flag = arg.split('=').next().unwrap_or(arg);
        if OWN_FLAGS.contains(&flag) {
            return Err(format!(
                "{flag} cannot be forwarded to the deployed serve: deploy sets it \
                 (use deploy's own --config for a settings file)"
            ));
        }
        if flag.starts_with("--") && flag.contains("token") {
            return Err(format!(
                "{flag}: tokens are never flags; they are read from the environment"
            ));
        }
    }
    Ok(())
}

/// The inner serve's command line: no secret is ever in it.
pub(super) fn serve_argv(layout: &Layout, has_config: bool, forwarded: &[String]) -> Vec<String> {
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

/// Host variables of serve settings that are passed through to the inner
/// serve when set here: the rest are set from the resolved configuration
/// or name host paths.
pub(super) fn passed_through() -> impl Iterator<Item = &'static str> {
    const SET_BY_DEPLOY: &[&str] = &[
        "OUTPOST_ID",
        "DEVIN_API_URL",
        "DEVIN_WORKER_STATIC_BASE_URL",
        "DEVIN_WORKER_ACCEPTOR_ID",
        "GARRISON_BACKEND",
        "GARRISON_HOME",
        "GARRISON_SNAPSHOT_DIR",
        "GARRISON_CONFIG_FILE",
        // This host's own admin listener, not the deployed one's.
        "GARRISON_LISTEN",
    ];
    names::ALL
        .iter()
        // Secrets are set one by one, from what this host resolved.
        .filter(|n| !n.secret)
        .filter_map(|n| n.env)
        .filter(|env| !SET_BY_DEPLOY.contains(env))
        .chain(["RUST_LOG"])
}

/// The Tensorlake settings `serve` resolved, if an outpost uses Tensorlake.
pub(super) fn tensorlake_settings(config: &ServeConfig) -> Option<&tensorlake::TensorlakeSettings> {
    config
        .backends
        .get(tensorlake::PLUGIN.name())
        .and_then(|b| b.downcast_ref::<tensorlake::TensorlakeSettings>())
}

/// The inner serve's environment: the credentials (the Devin token, the
/// Tensorlake key, `GIT_TOKEN` if set here), the resolved settings, and the
/// serve variables set on this host. Only this map holds the secrets: the
/// process API takes it at start, so they are in no image and no argv.
/// What every deployed serve's environment holds, whatever it runs on: the
/// host's passed-through variables, `GIT_TOKEN`, and Devin's settings as
/// this host resolved them (token, API URL, outposts, static base URL).
pub(super) fn devin_env(
    config: &ServeConfig,
    host_vars: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in passed_through() {
        if let Some(value) = host_vars.get(var) {
            env.insert(var.to_owned(), value.clone());
        }
    }
    if let Some(token) = host_vars.get(orchestrator::repos::GIT_TOKEN_ENV) {
        env.insert(orchestrator::repos::GIT_TOKEN_ENV.to_owned(), token.clone());
    }
    let outposts: Vec<&str> = config
        .outposts
        .iter()
        .map(|o| o.outpost_id.as_str())
        .collect();
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_owned(), v.to_owned());
    };
    set(orchestrator::settings::TOKEN_ENV, config.token.expose());
    set("DEVIN_API_URL", &config.api_url);
    set("OUTPOST_ID", &outposts.join(","));
    set("DEVIN_WORKER_STATIC_BASE_URL", &config.static_base_url);
    env
}

pub(super) fn serve_env(
    config: &ServeConfig,
    host_vars: &BTreeMap<String, String>,
    layout: &Layout,
) -> Result<BTreeMap<String, String>, String> {
    let tensorlake = tensorlake_settings(config).ok_or_else(|| {
        "no outpost is served with the tensorlake backend (an [[outpost]] table names \
         another backend)"
            .to_owned()
    })?;
    let mut env = devin_env(config, host_vars);
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_owned(), v.to_owned());
    };
    if let Some(id) = &config.acceptor_id {
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
    Ok(env)
}

/// `1d 02h 03m`, `4h 05m 06s`, `7m 08s` or `9s`.
pub(super) fn uptime(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h:02}h {m:02}m")
    } else if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

/// The settings `garrison serve` resolves from exactly these host
/// variables, and the variables: what a deploy plan's tests start from.
#[cfg(test)]
pub(super) fn resolved_from(vars: &[(&str, &str)]) -> (ServeConfig, BTreeMap<String, String>) {
    let vars: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let host = orchestrator::settings::HostEnv::new(1000, vars.clone());
    let raw = orchestrator::settings::RawSettings::from_env(&host);
    let config = orchestrator::settings::resolve(raw, None, &host, &crate::backends::ALL).unwrap();
    (config, vars)
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
        assert!(check_serve_args(&["--max-concurrent".into(), "8".into()]).is_ok());
        for bad in [
            "--backend",
            "--state-dir=/x",
            "--config",
            "--token",
            "--git-token=x",
        ] {
            assert!(check_serve_args(&[bad.into()]).is_err(), "{bad}");
        }
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
        let (config, vars) = resolved_from(&[
            ("HOME", "/home/op"),
            ("GARRISON_BACKEND", "tensorlake"),
            ("OUTPOST_ID", "op-a,op-b"),
            ("DEVIN_OUTPOSTS_TOKEN", "cog_secret_token"),
            ("TENSORLAKE_API_KEY", "tl_secret_key"),
            ("TENSORLAKE_IMAGE", "garrison-session"),
            ("GIT_TOKEN", "ghp_secret"),
            ("MAX_CONCURRENT_SESSIONS", "7"),
            ("GARRISON_HOME", "/var/lib/here"),
            ("GARRISON_SNAPSHOT_DIR", "/srv/snaps"),
            ("UNRELATED", "x"),
        ]);
        let layout = Layout::new("/garrison", "sb1");
        let env = serve_env(&config, &vars, &layout).unwrap();
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("DEVIN_OUTPOSTS_TOKEN"), Some("cog_secret_token"));
        assert_eq!(get("TENSORLAKE_API_KEY"), Some("tl_secret_key"));
        assert_eq!(get("GIT_TOKEN"), Some("ghp_secret"));
        assert_eq!(get("OUTPOST_ID"), Some("op-a,op-b"));
        assert_eq!(get("MAX_CONCURRENT_SESSIONS"), Some("7"));
        assert_eq!(get("TENSORLAKE_IMAGE"), Some("garrison-session"));
        assert_eq!(get("SANDBOX_TIMEOUT_SECS"), Some("1800"));
        assert_eq!(get("GARRISON_CONFIG"), Some("/garrison/deploy/config"));
        assert_eq!(get("HOME"), Some("/garrison/deploy/home"));
        for absent in [
            "GARRISON_HOME",
            "GARRISON_SNAPSHOT_DIR",
            "GARRISON_BACKEND",
            "UNRELATED",
        ] {
            assert_eq!(get(absent), None, "{absent}");
        }
        let argv = serve_argv(&layout, false, &[]).join(" ");
        for secret in ["cog_secret_token", "tl_secret_key", "ghp_secret"] {
            assert!(!argv.contains(secret));
        }
    }

    #[test]
    fn uptimes() {
        assert_eq!(uptime(9_999), "9s");
        assert_eq!(uptime(68_000), "1m 08s");
        assert_eq!(uptime(3_600_000 * 4 + 306_000), "4h 05m 06s");
        assert_eq!(uptime(86_400_000 + 7_380_000), "1d 02h 03m");
        assert_eq!(uptime(-5), "0s");
    }
}
