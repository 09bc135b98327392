//! `garrison doctor`: checks what `garrison serve` needs (settings, token,
//! scopes, outpost, backend prerequisites, snapshot store, disk, clock) and
//! prints each with a ✓ or ✗ and what to do about it. Exits 1 when a
//! required check fails.
//!
//! It reads the same settings as `garrison serve` (flags, environment, the
//! TOML file, the credentials file) but writes nothing on this machine: no
//! state directory, image store or credentials file is created. The one
//! write is a probe object in an object snapshot store, deleted again.

mod api;
pub(crate) mod check;
mod cloud;
mod disk;
mod env_file;
mod report;
mod store;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, FromArgMatches};
use fleet::{ClientOptions, FleetClient, RetryPolicy, Secret};
use orchestrator::settings::ServeConfig;
use orchestrator::settings::{
    self, Credentials, HostEnv, Origin, RawSettings, SettingsError, Sourced, TOKEN_ENV,
};

use crate::commands::serve::{ServeArgs, file_layer, with_environment_variable};
use crate::logging::LogFormat;
use check::Check;

/// Flags of `garrison doctor`: the subset of `garrison serve`'s that says
/// where to look. Their variables, and the rest of serve's settings, are
/// read from the environment and the TOML file as serve reads them.
#[derive(Args, Debug)]
#[command(mut_args = with_environment_variable)]
pub(crate) struct DoctorArgs {
    /// Outpost to check; repeat for several [default: as `garrison serve`]
    #[arg(long = "outpost", value_name = "ID")]
    outposts: Vec<String>,
    /// Devin API base, without /opbeta [default: as `garrison serve`]
    #[arg(long, value_name = "URL")]
    api_url: Option<String>,
    /// Sandbox backend whose prerequisites are required [default: as `garrison serve`]
    #[arg(long, value_name = "KIND")]
    backend: Option<String>,
    /// Garrison's state directory [default: as `garrison serve`]
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Snapshot directory or object store to probe [default: as `garrison serve`]
    #[arg(long, value_name = "DIR|URL")]
    snapshot_store: Option<String>,
    /// TOML settings file [default: $GARRISON_CONFIG/garrison.toml, if it exists]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of CDI specs whose devices the local backend lists; repeat for several
    /// [default: as `garrison serve`]
    #[arg(long = "cdi-spec-dir", value_name = "DIR")]
    cdi_spec_dirs: Vec<PathBuf>,
    /// CDI device the local backend must find; repeat for several [default: as `garrison serve`]
    #[arg(long = "device", value_name = "NAME")]
    devices: Vec<String>,
    /// Print the report as one JSON object
    ///
    /// Its fields: ok (true when no required check failed),
    /// required_failed (how many did), and sections, each with a title and
    /// its checks: name, outcome (pass, fail, warn or info), detail, remedy
    /// (null on a pass) and required (false for advice only).
    #[arg(long)]
    json: bool,
}

impl DoctorArgs {
    /// `garrison serve` called with the same flags, parsed by serve's own
    /// parser, so the flag layer is built by the same code (and the
    /// environment layer by [`ServeArgs::to_raw`]).
    fn as_serve_args(&self) -> anyhow::Result<ServeArgs> {
        let mut argv: Vec<std::ffi::OsString> = vec!["serve".into()];
        for outpost in &self.outposts {
            argv.extend(["--outpost".into(), outpost.into()]);
        }
        for dir in &self.cdi_spec_dirs {
            argv.extend(["--cdi-spec-dir".into(), dir.into()]);
        }
        for device in &self.devices {
            argv.extend(["--device".into(), device.into()]);
        }
        let mut push = |flag: &str, value: Option<std::ffi::OsString>| {
            if let Some(value) = value {
                argv.extend([flag.into(), value]);
            }
        };
        push("--api-url", self.api_url.clone().map(Into::into));
        push("--backend", self.backend.clone().map(Into::into));
        push("--state-dir", self.state_dir.clone().map(Into::into));
        push(
            "--snapshot-store",
            self.snapshot_store.clone().map(Into::into),
        );
        push("--config", self.config.clone().map(Into::into));
        let matches =
            ServeArgs::augment_args(clap::Command::new("serve")).try_get_matches_from(argv)?;
        Ok(ServeArgs::from_arg_matches(&matches)?)
    }
}

/// A token that stands in while the rest of the settings are resolved when
/// no real one exists (its absence is reported by its own check).
const PLACEHOLDER_TOKEN: &str = "doctor-placeholder";
const PLACEHOLDER_OUTPOST: &str = "doctor-placeholder";

pub(crate) async fn run(args: DoctorArgs) -> anyhow::Result<()> {
    // Retries and warnings of the fleet client would interleave with the
    // report; the report says what failed.
    crate::logging::init_with_default(LogFormat::Text, "error");
    let checks = collect(&args).await;
    let blocking = checks
        .iter()
        .flat_map(|(_, c)| c)
        .filter(|c| c.is_blocking())
        .count();
    if args.json {
        crate::output::json(&report::json(&checks, blocking))?;
    } else {
        crate::output::print(&report::text(&checks, blocking))?;
    }
    if blocking > 0 {
        std::process::exit(1);
    }
    Ok(())
}

type Section = (String, Vec<Check>);

async fn collect(args: &DoctorArgs) -> Vec<Section> {
    let (host, env_file_check, from_file) = with_env_file(HostEnv::current());
    let mut sections = Vec::new();

    let (settings_check, resolved) = resolve(args, &host);
    let (token_check, token) = token_present(&host, &from_file);
    sections.push(("Settings".to_owned(), vec![env_file_check, settings_check]));

    let mut credentials = vec![token_check];
    if let (Some(r), Some(token)) = (&resolved, &token) {
        match client(&r.config.api_url, token) {
            Ok(client) => {
                credentials
                    .extend(api::checks(&client, &r.config.api_url, token, &r.outposts).await);
            }
            Err(e) => credentials.push(Check::fail(
                "fleet API client",
                format!("{e:#}"),
                "check the API URL",
            )),
        }
    } else {
        credentials.push(Check::info(
            "API checks",
            "not run: fix the lines above first",
        ));
    }
    sections.push(("Credentials and outpost".to_owned(), credentials));

    let state_dir = match &resolved {
        Some(r) => r.config.state_dir.clone(),
        None => args
            .state_dir
            .clone()
            .or_else(|| RawSettings::from_env(&host).state_dir.map(|dir| dir.value))
            .or_else(|| host.default_state_dir().ok())
            .unwrap_or_else(|| PathBuf::from("/var/lib/garrison")),
    };
    let backends: BTreeSet<&'static str> = match &resolved {
        Some(r) => r.config.outposts.iter().map(|o| o.backend).collect(),
        // Settings that do not resolve: the backend asked for, if any.
        None => BTreeSet::from([args
            .backend
            .as_deref()
            .and_then(crate::backends::find)
            .map_or(settings::DEFAULT_BACKEND, |b| b.name())]),
    };
    sections.extend(
        backend_sections(&backends, &state_dir, resolved.as_ref().map(|r| &r.config)).await,
    );
    if let Some(r) = &resolved {
        sections.push(store::checks(&r.config).await);
    }
    sections.push((
        format!("State directory {}", state_dir.display()),
        vec![
            disk::disk_space(&state_dir),
            store::unrestorable(&state_dir),
        ],
    ));
    sections
}

struct Resolved {
    config: ServeConfig,
    /// The configured outposts (empty when none is: the config then holds
    /// a placeholder).
    outposts: Vec<String>,
}

/// The settings as `garrison serve` would resolve them. A missing token or
/// outpost has checks of its own, so placeholders stand in for them here.
fn resolve(args: &DoctorArgs, host: &HostEnv) -> (Check, Option<Resolved>) {
    let name = "settings";
    let fail = |e: &dyn std::fmt::Display| {
        (
            Check::fail(
                name,
                e.to_string(),
                "fix the setting named above (garrison serve --help lists them)",
            ),
            None,
        )
    };
    let file = match file_layer(args.config.as_deref(), host) {
        Ok(raw) => raw,
        Err(e) => return fail(&format!("{e:#}")),
    };
    // An unreadable credentials file is the token check's to report.
    let credentials_path = host
        .config_dir()
        .ok()
        .map(|d| d.join(settings::CREDENTIALS_FILE_NAME));
    let credentials = credentials_path
        .as_deref()
        .and_then(|p| settings::load_credentials(p).ok().flatten());
    let stored = credentials_path.as_deref().zip(credentials.as_ref());

    let serve_args = match args.as_serve_args() {
        Ok(a) => a,
        Err(e) => return fail(&format!("{e:#}")),
    };
    let mut raw = serve_args.to_raw(host).or(file);
    if raw.token.is_none() && stored.is_none() {
        raw.token = Some(Sourced::new(
            Secret::new(PLACEHOLDER_TOKEN),
            Origin::Env(TOKEN_ENV),
        ));
    }
    let (config, outposts) =
        match settings::resolve(raw.clone(), stored, host, &crate::backends::ALL) {
            Ok(config) => {
                let ids = config
                    .outposts
                    .iter()
                    .map(|o| o.outpost_id.clone())
                    .collect();
                (config, ids)
            }
            Err(SettingsError::NoOutpost) => {
                raw.outposts = Some(Sourced::new(
                    vec![PLACEHOLDER_OUTPOST.to_owned()],
                    Origin::Flag("--outpost"),
                ));
                match settings::resolve(raw, stored, host, &crate::backends::ALL) {
                    Ok(config) => (config, Vec::new()),
                    Err(e) => return fail(&e),
                }
            }
            Err(e) => return fail(&e),
        };
    let backends: BTreeSet<&str> = config.outposts.iter().map(|o| o.backend).collect();
    let check = Check::pass(
        name,
        format!(
            "api {}, {} outpost{}, backend {}, state dir {}",
            config.api_url,
            outposts.len(),
            if outposts.len() == 1 { "" } else { "s" },
            backends.into_iter().collect::<Vec<_>>().join("+"),
            config.state_dir.display()
        ),
    );
    (check, Some(Resolved { config, outposts }))
}

/// The environment the service runs with: this process's, and under it
/// (as root) the variables of the environment file the systemd unit names,
/// `$GARRISON_CONFIG/env` (`/etc/garrison/env`). Returns the environment,
/// the line that reports the file (names only, never values), and where
/// the variables taken from it came from.
fn with_env_file(mut host: HostEnv) -> (HostEnv, Check, Option<(PathBuf, BTreeSet<String>)>) {
    use env_file::EnvFile;
    let name = "environment file";
    let Ok(dir) = host.config_dir() else {
        return (host, Check::info(name, "no configuration directory"), None);
    };
    match env_file::load_env_file(&dir.join(env_file::ENV_FILE_NAME), host.euid) {
        EnvFile::Absent { path } => (
            host,
            Check::info(
                name,
                format!("{} does not exist (optional)", path.display()),
            ),
            None,
        ),
        EnvFile::Ignored { path, reason } => {
            let check = if host.euid == 0 {
                Check::warn(
                    name,
                    format!("{} is ignored: {reason}", path.display()),
                    "the service's systemd unit reads it; fix its owner and mode",
                )
            } else {
                Check::info(name, format!("{} not read: {reason}", path.display()))
            };
            (host, check, None)
        }
        EnvFile::Read {
            path,
            vars,
            bad_lines,
        } => {
            // This process's own variables win: they are what the operator
            // is trying out.
            let mut taken = BTreeSet::new();
            for (key, value) in vars {
                if host.var(&key).is_none() {
                    taken.insert(key.clone());
                    host.vars.insert(key, value);
                }
            }
            let names: Vec<&str> = taken.iter().map(String::as_str).collect();
            let mut detail = format!(
                "{}: {} variable{} read{}",
                path.display(),
                names.len(),
                if names.len() == 1 { "" } else { "s" },
                if names.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", names.join(", "))
                }
            );
            let check = if bad_lines.is_empty() {
                Check::pass(name, detail)
            } else {
                let lines: Vec<String> = bad_lines.iter().map(usize::to_string).collect();
                detail.push_str(&format!("; line {} is not KEY=VALUE", lines.join(", ")));
                Check::warn(
                    name,
                    detail,
                    "systemd skips such lines too; fix or remove them",
                )
            };
            (host, check, Some((path, taken)))
        }
    }
}

/// Where the token comes from: `DEVIN_OUTPOSTS_TOKEN` (from the process or
/// the environment file), else the credentials file, which must be private
/// to its owner (mode 0600).
fn token_present(
    host: &HostEnv,
    env_file: &Option<(PathBuf, BTreeSet<String>)>,
) -> (Check, Option<Secret>) {
    let name = "token present";
    let path = host.credentials_path().ok();
    if let Some(token) = host.var(TOKEN_ENV) {
        let origin = match env_file {
            Some((file, names)) if names.contains(TOKEN_ENV) => file.display().to_string(),
            _ => "environment".to_owned(),
        };
        return (
            Check::pass(name, format!("{TOKEN_ENV} ({origin})")),
            Some(Secret::new(token)),
        );
    }
    let Some(path) = path else {
        return (
            Check::fail(
                name,
                format!("{TOKEN_ENV} is not set and HOME is not set"),
                "set DEVIN_OUTPOSTS_TOKEN, or GARRISON_CONFIG for the credentials file",
            ),
            None,
        );
    };
    match settings::load_credentials(&path) {
        Ok(Some(Credentials { token, .. })) => (
            Check::pass(name, format!("{} (mode 0600)", path.display())),
            Some(token),
        ),
        Ok(None) => (
            Check::fail(
                name,
                format!(
                    "{TOKEN_ENV} is not set and {} does not exist",
                    path.display()
                ),
                "run `garrison connect` (or set DEVIN_OUTPOSTS_TOKEN)",
            ),
            None,
        ),
        Err(e @ SettingsError::InsecureCredentials { .. }) => (
            Check::fail(name, e.to_string(), format!("chmod 600 {}", path.display())),
            None,
        ),
        Err(e) => (
            Check::fail(
                name,
                e.to_string(),
                "run `garrison connect` again to rewrite it",
            ),
            None,
        ),
    }
}

fn client(api_url: &str, token: &Secret) -> anyhow::Result<FleetClient> {
    // One try per request: a doctor should answer quickly, and says what
    // failed rather than retrying it.
    let options = ClientOptions {
        request_timeout: Duration::from_secs(15),
        retry: RetryPolicy::none(),
        ..ClientOptions::default()
    };
    Ok(FleetClient::new(api_url, token.clone(), options)?)
}

/// The configured backends' prerequisites, each required; only those (a
/// `doctor --backend modal` says nothing about the local backend).
async fn backend_sections(
    backends: &BTreeSet<&'static str>,
    state_dir: &Path,
    config: Option<&ServeConfig>,
) -> Vec<Section> {
    let mut sections = Vec::new();
    for &kind in backends {
        let not_checked = || {
            vec![Check::info(
                format!("{kind} backend"),
                "its prerequisites are not checked by this version",
            )]
        };
        let checks = match crate::backends::find(kind) {
            Some(b) if b.has_remote_api() => cloud::checks(b, config).await,
            Some(b) => {
                let configured = config.and_then(|c| c.backends.get(kind));
                b.prerequisites(configured.map(|b| b.as_ref()), state_dir)
                    .unwrap_or_else(not_checked)
            }
            None => not_checked(),
        };
        sections.push((format!("Backend {kind} (configured)"), checks));
    }
    sections
}
