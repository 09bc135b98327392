//! The settings of `garrison deploy <backend>`: resolved exactly as the
//! deployed `garrison serve --backend <backend> <SERVE_ARGS>` will resolve
//! them, so that a mistake is reported here rather than inside the
//! sandbox, and the part of the deployed serve's environment that is the
//! same whatever it runs on.

use std::collections::BTreeMap;

use anyhow::Context;
use clap::Parser;
use orchestrator::settings::{HostEnv, ServeConfig, names};

use super::cli::TargetArgs;
use crate::backends;
use crate::commands::serve::ServeArgs;

/// `garrison serve`'s flags, parsed as serve would parse them.
#[derive(Parser, Debug)]
#[command(name = "serve")]
struct ServeCli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// What deploying needs from the settings.
pub(super) struct Resolved {
    /// What the deployed serve will resolve.
    pub(super) config: ServeConfig,
    /// The settings file to copy in.
    pub(super) config_file: Option<Vec<u8>>,
    /// This host's environment.
    pub(super) host_vars: BTreeMap<String, String>,
}

/// Resolves the settings as `garrison serve --backend <backend>
/// [--config FILE] <SERVE_ARGS>` would.
pub(super) fn resolve(backend: &str, args: &TargetArgs) -> anyhow::Result<Resolved> {
    let mut argv: Vec<String> = vec!["serve".into(), "--backend".into(), backend.into()];
    let config_path = backends::settings_file(&HostEnv::current(), args.config.as_deref());
    if let Some(path) = &config_path {
        argv.push("--config".into());
        argv.push(path.display().to_string());
    }
    argv.extend(args.serve_args.iter().cloned());
    let cli = ServeCli::try_parse_from(&argv).map_err(|e| {
        anyhow::anyhow!(
            "the serve options after `--`: {}",
            e.render().to_string().trim()
        )
    })?;
    let config = crate::commands::serve::resolve(&cli.serve)?;
    let config_file = match &config_path {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => None,
    };
    Ok(Resolved {
        config,
        config_file,
        host_vars: HostEnv::current().vars,
    })
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

/// Host variables of serve settings that are passed through to the inner
/// serve when set here: the rest are set from the resolved configuration
/// or name host paths.
fn passed_through() -> impl Iterator<Item = &'static str> {
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
    if let Some(token) = host_vars.get(orchestrator::GIT_TOKEN_ENV) {
        env.insert(orchestrator::GIT_TOKEN_ENV.to_owned(), token.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings `garrison serve` resolves from exactly these host
    /// variables, and the variables.
    fn resolved_from(vars: &[(&str, &str)]) -> (ServeConfig, BTreeMap<String, String>) {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let host = HostEnv::new(1000, vars.clone());
        let raw = orchestrator::settings::RawSettings::from_env(&host);
        let config = orchestrator::settings::resolve(raw, None, &host, &backends::ALL).unwrap();
        (config, vars)
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
    }

    /// The part every backend's deployed serve gets; each backend's crate
    /// tests what it adds.
    #[test]
    fn the_environment_carries_the_credentials_and_settings_but_no_host_paths() {
        for backend in ["tensorlake", "modal"] {
            let (config, vars) = resolved_from(&[
                ("HOME", "/home/op"),
                ("GARRISON_BACKEND", backend),
                ("OUTPOST_ID", "op-a,op-b"),
                ("DEVIN_OUTPOSTS_TOKEN", "cog_secret_token"),
                ("TENSORLAKE_API_KEY", "tl_secret_key"),
                ("MODAL_TOKEN_ID", "ak-secret-id"),
                ("MODAL_TOKEN_SECRET", "as-secret-secret"),
                ("GIT_TOKEN", "ghp_secret"),
                ("MAX_CONCURRENT_SESSIONS", "7"),
                ("GARRISON_HOME", "/var/lib/here"),
                ("GARRISON_SNAPSHOT_DIR", "/srv/snaps"),
                ("UNRELATED", "x"),
            ]);
            let env = devin_env(&config, &vars);
            let get = |k: &str| env.get(k).map(String::as_str);
            assert_eq!(get("DEVIN_OUTPOSTS_TOKEN"), Some("cog_secret_token"));
            assert_eq!(get("GIT_TOKEN"), Some("ghp_secret"));
            assert_eq!(get("OUTPOST_ID"), Some("op-a,op-b"));
            assert_eq!(get("MAX_CONCURRENT_SESSIONS"), Some("7"));
            for absent in [
                "HOME",
                "GARRISON_HOME",
                "GARRISON_SNAPSHOT_DIR",
                "GARRISON_BACKEND",
                "UNRELATED",
                "DEVIN_WORKER_ACCEPTOR_ID",
            ] {
                assert_eq!(get(absent), None, "{backend}: {absent}");
            }
            assert!(config.backends.contains_key(backend), "{backend}");
        }
    }
}
