//! The command line of `garrison serve`, and how it becomes a
//! [`ServeConfig`].
//!
//! clap reads the flags only: the environment layer is
//! [`RawSettings::from_env`], so each value's origin is where it was read
//! (`--cpus`, or `SANDBOX_CPUS (environment)`), never inferred. `--help`
//! still names each setting's variable ([`with_environment_variable`]).
//! Numbers stay text here: they are checked in [`orchestrator::settings`],
//! where an error can say which flag, variable or file key held the bad
//! value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use orchestrator::settings::ServeConfig;
use orchestrator::settings::names::Kind;
use orchestrator::settings::{
    self, HostEnv, Origin, ProcessSettings, RawSettings, Setting, SettingsError, Sourced, names,
};

/// `--help`'s closing sections: examples and the rules, with each backend's
/// own settings from its plug-in.
fn after_help() -> String {
    let mut help = AFTER_HELP_HEAD.to_owned();
    for backend in &crate::backends::ALL {
        if !backend.settings_help().is_empty() {
            help.push_str(&format!(
                "\n\n{} (--backend {}):\n{}",
                backend.name(),
                backend.name(),
                backend.settings_help()
            ));
        }
    }
    help.push_str("\n\n");
    help.push_str(AFTER_HELP_TAIL);
    help
}

const AFTER_HELP_HEAD: &str = "\
Examples:
  # Serve the outpost saved by `garrison connect`, with the defaults:
  garrison serve

  # Two outposts, up to 8 sessions each, bigger sandboxes:
  garrison serve --outpost op-a --outpost op-b --max-concurrent 8 --cpus 4 --memory-mb 16384

  # Everything from a file, waiting for running sessions on SIGTERM:
  garrison serve --config /etc/garrison/garrison.toml --drain

Token:
  Never a flag (the command line is visible to every user). It is read from
  DEVIN_OUTPOSTS_TOKEN, else from the credentials file that `garrison connect`
  writes: $GARRISON_CONFIG/credentials.json, mode 0600 ($GARRISON_CONFIG is
  /etc/garrison as root, else ~/.config/garrison).

Repositories:
  --repos / REPOS (comma-separated clone URLs: https://, http://, ssh://,
  file:// or user@host:path) are cloned into each new sandbox's workspace
  before devin-remote starts; not again when it is restored from a snapshot.
  For private ones, GIT_USERNAME (default x-access-token) and GIT_TOKEN: the
  token is read from the environment only (never a flag, never the file) and
  given to the clone command only. URLs with credentials in them are refused.";

const AFTER_HELP_TAIL: &str = "\
Precedence:
  flags, then environment variables, then the TOML file (--config, else
  $GARRISON_CONFIG/garrison.toml if it exists), then the defaults. In the file,
  settings are snake_case keys (max_concurrent = 5, cpus = 4, ...), and
  [[outpost]] tables (id, backend, max_concurrent, cpus, memory_mb, disk_mb,
  image, platform, repos) override them per outpost.";

/// Serve Devin sessions of one or more outposts.
///
/// Each flag's help, accepted values and default come from the settings
/// table ([`names::ALL`]), added by [`setting_help`]: the doc comments of
/// the fields below would only be overwritten.
#[derive(Args, Clone, Debug, PartialEq)]
#[command(after_help = after_help(), mut_args = setting_help)]
pub(crate) struct ServeArgs {
    #[arg(long = "outpost", value_name = "ID")]
    pub outposts: Vec<String>,
    #[arg(long, value_name = "URL")]
    pub api_url: Option<String>,
    #[arg(long, value_name = "ID")]
    pub acceptor_id: Option<String>,
    #[arg(long, value_name = "URL")]
    pub static_base_url: Option<String>,
    #[arg(long, value_name = "KIND")]
    pub backend: Option<String>,
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<String>,
    #[arg(long, value_name = "N")]
    pub cpus: Option<String>,
    #[arg(long, value_name = "MIB")]
    pub memory_mb: Option<String>,
    #[arg(long, value_name = "MIB")]
    pub disk_mb: Option<String>,
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    #[arg(long, value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,
    #[arg(long, value_name = "DIR|URL")]
    pub snapshot_store: Option<String>,
    #[arg(long, value_name = "FILE")]
    pub snapshot_key_file: Option<PathBuf>,
    #[arg(long, value_name = "fail|fresh")]
    pub snapshot_integrity_fallback: Option<String>,
    #[arg(long, value_name = "DURATION")]
    pub snapshot_retention: Option<String>,
    #[arg(long, value_name = "SECS")]
    pub relist_interval_secs: Option<String>,
    #[arg(long)]
    pub drain: bool,
    #[arg(long, value_name = "N")]
    pub max_restarts: Option<String>,
    #[arg(long, value_name = "SECS")]
    pub suspend_exit_grace_secs: Option<String>,
    #[arg(long, value_name = "URL")]
    pub gateway_url: Option<String>,
    #[arg(long, value_name = "MIB")]
    pub session_log_max_mb: Option<String>,
    #[arg(long = "repos", value_name = "URLS")]
    pub repos: Vec<String>,
    #[arg(long, value_name = "NAME")]
    pub git_username: Option<String>,
    #[arg(long, value_name = "text|json")]
    pub log_format: Option<String>,
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The flags backends declared for their settings (`--runtime`, ...).
    #[command(flatten)]
    pub backend_flags: BackendFlags,
}

/// The flags of backends' settings, from each plug-in's table (those
/// declared with a flag; never a secret), by the setting's file key.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct BackendFlags(pub BTreeMap<&'static str, String>);

/// Backends' settings that have a flag.
fn backend_flag_settings() -> impl Iterator<Item = &'static Setting> {
    crate::backends::ALL
        .iter()
        .flat_map(|b| b.settings())
        .filter(|s| s.flag.is_some() && !s.secret)
}

impl clap::FromArgMatches for BackendFlags {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = BTreeMap::new();
        for setting in backend_flag_settings() {
            if let Some(value) = matches.get_one::<String>(setting.name) {
                flags.insert(setting.name, value.clone());
            }
        }
        Ok(Self(flags))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for BackendFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        backend_flag_settings().fold(cmd, |cmd, setting| {
            let backend = crate::backends::ALL
                .iter()
                .find(|b| b.settings().iter().any(|s| s.name == setting.name))
                .map(|b| b.name())
                .unwrap_or_default();
            let mut help = format!("{} (--backend {backend})", setting.help());
            if let Some(var) = setting.env {
                help.push_str(&format!(" [env: {var}]"));
            }
            let mut arg = clap::Arg::new(setting.name)
                .long(setting.long().unwrap_or(setting.name))
                .help(help)
                .allow_negative_numbers(setting.kind.is_number());
            arg = match setting.kind {
                // `--desktop` alone turns it on; `--userns=false` off.
                Kind::Bool => arg
                    .value_name("true|false")
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value("true"),
                // The accepted words are in the help.
                _ => arg.value_name("VALUE"),
            };
            cmd.arg(arg)
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl ServeArgs {
    /// The flag layer and the environment layer, merged (flags first).
    pub(crate) fn to_raw(&self, host: &HostEnv) -> RawSettings {
        self.flag_layer().or(RawSettings::from_env(host))
    }

    /// The values given as flags, and only those.
    pub(crate) fn flag_layer(&self) -> RawSettings {
        let text = |value: &Option<String>, setting: Setting| Some(flag(value.clone()?, setting));
        let list = |values: &[String], setting: Setting| {
            (!values.is_empty()).then(|| flag(values.to_vec(), setting))
        };
        RawSettings {
            outposts: list(&self.outposts, names::OUTPOST),
            api_url: text(&self.api_url, names::API_URL),
            acceptor_id: text(&self.acceptor_id, names::ACCEPTOR_ID),
            static_base_url: text(&self.static_base_url, names::STATIC_BASE_URL),
            backend: text(&self.backend, names::BACKEND),
            max_concurrent: text(&self.max_concurrent, names::MAX_CONCURRENT),
            state_dir: self
                .state_dir
                .clone()
                .map(|dir| flag(dir, names::STATE_DIR)),
            snapshot_dir: self
                .snapshot_dir
                .clone()
                .map(|dir| flag(dir, names::SNAPSHOT_DIR)),
            snapshot_store: text(&self.snapshot_store, names::SNAPSHOT_STORE),
            snapshot_key_file: self
                .snapshot_key_file
                .clone()
                .map(|file| flag(file, names::SNAPSHOT_KEY_FILE)),
            snapshot_key: None,
            snapshot_integrity_fallback: text(
                &self.snapshot_integrity_fallback,
                names::SNAPSHOT_INTEGRITY_FALLBACK,
            ),
            snapshot_retention: text(&self.snapshot_retention, names::SNAPSHOT_RETENTION),
            relist_interval_secs: text(&self.relist_interval_secs, names::RELIST_INTERVAL_SECS),
            drain: self.drain.then(|| flag("true".to_owned(), names::DRAIN)),
            cpus: text(&self.cpus, names::CPUS),
            memory_mb: text(&self.memory_mb, names::MEMORY_MB),
            disk_mb: text(&self.disk_mb, names::DISK_MB),
            image: text(&self.image, names::IMAGE),
            max_restarts: text(&self.max_restarts, names::MAX_RESTARTS),
            suspend_exit_grace_secs: text(
                &self.suspend_exit_grace_secs,
                names::SUSPEND_EXIT_GRACE_SECS,
            ),
            gateway_url: text(&self.gateway_url, names::GATEWAY_URL),
            session_log_max_mb: text(&self.session_log_max_mb, names::SESSION_LOG_MAX_MB),
            // Never from the command line: see after_help().
            token: None,
            repos: list(&self.repos, names::REPOS),
            git_username: text(&self.git_username, names::GIT_USERNAME),
            git_token: None,
            log_format: text(&self.log_format, names::LOG_FORMAT),
            listen: text(&self.listen, names::LISTEN),
            backend_flags: self
                .backend_flags
                .0
                .iter()
                .filter_map(|(key, value)| {
                    let setting = backend_flag_settings().find(|s| s.name == *key)?;
                    Some((*key, flag(value.clone(), *setting)))
                })
                .collect(),
            // Tensorlake's settings have no flags (the key never in argv).
            ..RawSettings::default()
        }
    }
}

fn flag<T>(value: T, setting: Setting) -> Sourced<T> {
    // Every setting read from a flag has one (secrets are never flags).
    Sourced::new(value, Origin::Flag(setting.flag.unwrap_or("--")))
}

/// The setting whose flag `arg` is, if any.
fn setting_of(arg: &clap::Arg) -> Option<&'static Setting> {
    let long = arg.get_long()?;
    names::ALL.iter().find(|s| s.long() == Some(long))
}

/// A setting's flag as the table declares it: its help, accepted values,
/// default and environment variable; numbers may be negative so that
/// validation, not the parser, says what is wrong with `-1`.
pub(super) fn setting_help(arg: clap::Arg) -> clap::Arg {
    let Some(setting) = setting_of(&arg) else {
        return arg;
    };
    let mut help = setting.help();
    if setting.kind == names::Kind::Backend {
        // The registry is the garrison crate's: the table cannot list it.
        help = help.replacen(
            setting.doc,
            &format!("{}: {}", setting.doc, crate::backends::help()),
            1,
        );
    }
    if let Some(var) = setting.env {
        help.push_str(&format!(" [env: {var}]"));
    }
    arg.help(help)
        .allow_negative_numbers(setting.kind.is_number())
}

/// Ends the help of a setting's flag with its environment variable, as
/// clap's own `env` would show it, from [`names::ALL`] (so the two cannot
/// drift), for commands that take a few of serve's settings with help of
/// their own. Flags that are not settings are left as they are.
pub(crate) fn with_environment_variable(arg: clap::Arg) -> clap::Arg {
    let Some(var) = setting_of(&arg).and_then(|s| s.env) else {
        return arg;
    };
    let suffix = |help: &clap::builder::StyledStr| format!("{help} [env: {var}]");
    let help = arg.get_help().map(suffix);
    let long_help = arg.get_long_help().map(suffix);
    let arg = match help {
        Some(help) => arg.help(help),
        None => arg,
    };
    match long_help {
        Some(long_help) => arg.long_help(long_help),
        None => arg,
    }
}

/// The TOML file layer: the file named by `--config`, else by
/// `GARRISON_CONFIG_FILE` (which must exist), else the default file if
/// there is one. (The file's name is not a setting of [`RawSettings`], so
/// its variable is read here, next to its flag.)
pub(crate) fn file_layer(
    config_flag: Option<&Path>,
    host: &HostEnv,
) -> Result<RawSettings, SettingsError> {
    let named = match config_flag {
        Some(path) => Some(flag(path.to_owned(), names::CONFIG)),
        None => names::CONFIG.env.and_then(|var| {
            Some(Sourced::new(
                PathBuf::from(host.var(var)?),
                Origin::Env(var),
            ))
        }),
    };
    if let Some(path) = named {
        return settings::load_file(&path.value, &crate::backends::ALL)?
            .ok_or_else(|| path.invalid(format!("{} does not exist", path.value.display())));
    }
    // Without a configuration directory (no HOME) there is simply no
    // default file; what is then missing is reported by `settings::resolve`.
    match host.config_file_path() {
        Ok(path) => Ok(settings::load_file(&path, &crate::backends::ALL)?.unwrap_or_default()),
        Err(_) => Ok(RawSettings::default()),
    }
}

/// Everything `garrison serve` runs with: the command line and environment,
/// the TOML file and the credentials file, validated.
pub(crate) fn resolve(args: &ServeArgs) -> Result<ServeConfig, SettingsError> {
    resolve_all(args).map(|(config, _)| config)
}

/// [`resolve`], and the settings of the process itself (its log format and
/// admin listener). Every error is a [`SettingsError`] naming the setting:
/// a configuration error, which `main` reports with its own exit code.
pub(crate) fn resolve_all(
    args: &ServeArgs,
) -> Result<(ServeConfig, ProcessSettings), SettingsError> {
    let host = HostEnv::current();
    let file = file_layer(args.config.as_deref(), &host)?;

    // Without a configuration directory there is no credentials file either.
    let credentials_path = host
        .config_dir()
        .ok()
        .map(|dir| dir.join(settings::CREDENTIALS_FILE_NAME));
    let credentials = match &credentials_path {
        Some(path) => settings::load_credentials(path)?,
        None => None,
    };
    let stored = credentials_path.as_deref().zip(credentials.as_ref());

    let raw = args.to_raw(&host).or(file);
    let process = settings::resolve_process(&raw)?;
    let config = settings::resolve(raw, stored, &host, &crate::backends::ALL)?;
    Ok((config, process))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::{CommandFactory, Parser, Subcommand};

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Subcommand, Debug)]
    enum Command {
        Serve(ServeArgs),
    }

    /// Parses `garrison serve <args>`: the flags alone, whatever the
    /// process environment holds.
    fn parse(args: &[&str]) -> ServeArgs {
        let argv = ["garrison", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Serve(args) => args,
        }
    }

    fn host(pairs: &[(&str, &str)]) -> HostEnv {
        let vars: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HostEnv::new(1000, vars)
    }

    /// The flags' part of `garrison serve --help`, one entry per flag (its
    /// line and its help), whitespace collapsed.
    fn help_entries() -> Vec<String> {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("serve")
            .expect("serve")
            .render_long_help()
            .to_string();
        let options = help.split("Examples:").next().expect("help");
        let mut entries: Vec<String> = Vec::new();
        for line in options.lines().map(str::trim) {
            if line.starts_with('-') {
                entries.push(String::new());
            }
            if let Some(entry) = entries.last_mut() {
                entry.push_str(line);
                entry.push(' ');
            }
        }
        entries
    }

    #[test]
    fn every_setting_has_its_flag_and_environment_variable() {
        let entries = help_entries();
        for setting in names::ALL {
            let Some(flag) = setting.flag else {
                assert!(setting.secret, "{} has no flag", setting.name);
                continue;
            };
            let entry = entries
                .iter()
                .find(|e| e.split_whitespace().next() == Some(flag))
                .unwrap_or_else(|| panic!("--help has no flag {flag}"));
            // The table's help, values and default, whitespace collapsed
            // as in `entries`.
            let help = setting
                .help()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let help = help.replacen(setting.doc, "", 1);
            assert!(
                entry.contains(help.trim()),
                "--help of {flag} lacks {help:?}: {entry}"
            );
            let doc = setting.doc.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                entry.contains(&doc),
                "--help of {flag} lacks {doc:?}: {entry}"
            );
            let var = setting.env.expect("every flag has a variable");
            assert!(
                entry.contains(&format!("[env: {var}]")),
                "--help of {flag} lacks [env: {var}]: {entry}"
            );
        }
        // Every flag of serve is a setting of the table.
        for entry in &entries {
            let flag = entry.split_whitespace().next().unwrap_or_default();
            let flag = flag.split(['[', '=', ',']).next().unwrap_or_default();
            if flag.starts_with("--") && flag != "--help" {
                let backends = crate::backends::ALL.iter().flat_map(|b| b.settings());
                assert!(
                    names::ALL
                        .iter()
                        .chain(backends)
                        .any(|s| s.flag == Some(flag)),
                    "{flag} is not in a settings table"
                );
            }
        }
        // clap reads no variable: the environment is one layer, read by
        // `RawSettings::from_env`. And nothing takes the token.
        let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
        assert!(cmd.get_arguments().all(|a| {
            a.get_env().is_none() && a.get_long().is_none_or(|l| !l.contains("token"))
        }));
        for var in [settings::TOKEN_ENV, orchestrator::repos::GIT_TOKEN_ENV] {
            let shown = format!("[env: {var}]");
            assert!(entries.iter().all(|e| !e.contains(&shown)), "{shown}");
        }
    }

    #[test]
    fn help_lists_environment_variables_examples_and_the_token_source() {
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("serve")
            .expect("serve")
            .render_long_help()
            .to_string();
        for needle in [
            "--max-concurrent",
            "MAX_CONCURRENT_SESSIONS",
            "SANDBOX_CPUS",
            "Examples:",
            "garrison serve --outpost op-a",
            "DEVIN_OUTPOSTS_TOKEN",
            "credentials.json",
            "TENSORLAKE_API_KEY",
            "SANDBOX_TIMEOUT_SECS",
        ] {
            assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
        }
    }

    #[test]
    fn flags_are_parsed_as_given() {
        let args = parse(&[
            "--outpost",
            "a,b",
            "--outpost",
            "c",
            "--cpus",
            "4",
            "--drain",
            "--log-format",
            "json",
            "--listen",
            "0.0.0.0:9999",
        ]);
        assert_eq!(args.outposts, ["a,b", "c"]);
        assert_eq!(args.cpus.as_deref(), Some("4"));
        assert!(args.drain);
        assert_eq!(args.log_format.as_deref(), Some("json"));
        assert_eq!(args.listen.as_deref(), Some("0.0.0.0:9999"));
    }

    #[test]
    fn log_format_and_listen_come_from_any_layer_and_have_defaults() {
        use orchestrator::settings::{LogFormat, resolve_process};
        let none = resolve_process(&parse(&[]).to_raw(&host(&[]))).expect("defaults");
        assert_eq!(none.log_format, LogFormat::Text);
        assert_eq!(none.listen, "127.0.0.1:9180".parse().expect("addr"));

        let h = host(&[
            ("GARRISON_LOG_FORMAT", "json"),
            ("GARRISON_LISTEN", "127.0.0.1:1"),
        ]);
        let env = resolve_process(&parse(&[]).to_raw(&h)).expect("env");
        assert_eq!(env.log_format, LogFormat::Json);
        assert_eq!(env.listen, "127.0.0.1:1".parse().expect("addr"));

        let flags = parse(&["--log-format", "text", "--listen", "[::1]:2"]);
        let both = resolve_process(&flags.to_raw(&h)).expect("flags");
        assert_eq!(both.log_format, LogFormat::Text);
        assert_eq!(both.listen, "[::1]:2".parse().expect("addr"));

        let bad = resolve_process(&parse(&["--listen", "nowhere"]).to_raw(&h)).unwrap_err();
        assert!(
            bad.to_string().starts_with("invalid --listen: \"nowhere\""),
            "{bad}"
        );
        let bad = resolve_process(&parse(&[]).to_raw(&host(&[("GARRISON_LOG_FORMAT", "xml")])))
            .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "invalid GARRISON_LOG_FORMAT (environment): \"xml\" is not text or json"
        );
    }

    #[test]
    fn backends_settings_have_flags_that_beat_their_variables() {
        let args = parse(&["--runtime", "runsc", "--desktop", "--userns=false"]);
        assert_eq!(args.backend_flags.0["runtime"], "runsc");
        assert_eq!(args.backend_flags.0["desktop"], "true");
        assert_eq!(args.backend_flags.0["userns"], "false");
        let with_var = host(&[("SANDBOX_RUNTIME", "runc")]);
        let raw = args.to_raw(&with_var);
        let source = settings::BackendSource::new(&with_var, &raw.backend_keys)
            .with_flags(&raw.backend_flags);
        use common::settings::SettingsSource;
        let runtime = source.get("SANDBOX_RUNTIME", "runtime").expect("set");
        assert_eq!(runtime.value, "runsc");
        assert_eq!(runtime.origin, Origin::Flag("--runtime"));
        // A bad value is the backend's to refuse, naming the flag.
        let raw = parse(&["--runtime", "docker"]).to_raw(&host(&[
            ("DEVIN_OUTPOSTS_TOKEN", "cog_x"),
            ("OUTPOST_ID", "op"),
            ("HOME", "/nonexistent"),
        ]));
        let error = settings::resolve(
            raw,
            None,
            &host(&[("HOME", "/nonexistent")]),
            &crate::backends::ALL,
        )
        .expect_err("refused");
        assert!(
            error.to_string().starts_with("invalid --runtime: "),
            "{error}"
        );
        // Modal's too, above its variables.
        let args = parse(&[
            "--modal-image",
            "im-flag",
            "--modal-sandbox-timeout-secs",
            "-1",
        ]);
        let with_var = host(&[
            ("MODAL_IMAGE", "im-env"),
            ("MODAL_TOKEN_ID", "ak-1"),
            ("MODAL_TOKEN_SECRET", "as-1"),
        ]);
        let raw = args.to_raw(&with_var);
        let source = settings::BackendSource::new(&with_var, &raw.backend_keys)
            .with_flags(&raw.backend_flags);
        let image = source.get("MODAL_IMAGE", "modal_image").expect("set");
        assert_eq!(image.value, "im-flag");
        assert_eq!(image.origin, Origin::Flag("--modal-image"));
        let error = modal::settings::resolve(&source).expect_err("refused");
        assert!(
            error.to_string().contains("--modal-sandbox-timeout-secs"),
            "{error}"
        );
        // Secrets never get one.
        assert!(Cli::try_parse_from(["garrison", "serve", "--tensorlake-api-key", "x"]).is_err());
        assert!(Cli::try_parse_from(["garrison", "serve", "--modal-token-secret", "x"]).is_err());
    }

    #[test]
    fn negative_numbers_reach_validation() {
        let args = parse(&["--max-concurrent", "-1", "--cpus", "-2"]);
        assert_eq!(args.max_concurrent.as_deref(), Some("-1"));
        assert_eq!(args.cpus.as_deref(), Some("-2"));
    }

    #[test]
    fn values_are_attributed_to_the_flag_or_the_variable() {
        // SANDBOX_CPUS and OUTPOST_ID are set, --cpus and --outpost absent.
        let args = parse(&["--memory-mb", "4096"]);
        let h = host(&[("SANDBOX_CPUS", "abc"), ("OUTPOST_ID", "op")]);
        let flags = args.flag_layer();
        assert_eq!(flags.cpus, None);
        assert_eq!(flags.outposts, None);
        assert_eq!(
            flags.memory_mb,
            Some(Sourced::new("4096".to_owned(), Origin::Flag("--memory-mb")))
        );
        let raw = args.to_raw(&h);
        assert_eq!(
            raw.cpus.map(|c| c.origin),
            Some(Origin::Env("SANDBOX_CPUS"))
        );
        assert_eq!(
            raw.outposts.map(|c| c.origin),
            Some(Origin::Env("OUTPOST_ID"))
        );
    }

    #[test]
    fn a_flag_beats_its_variable() {
        let args = parse(&["--cpus", "4", "--state-dir", "/flag"]);
        let h = host(&[("SANDBOX_CPUS", "3"), ("GARRISON_HOME", "/env")]);
        let raw = args.to_raw(&h);
        assert_eq!(
            raw.cpus,
            Some(Sourced::new("4".to_owned(), Origin::Flag("--cpus")))
        );
        assert_eq!(
            raw.state_dir,
            Some(Sourced::new(
                PathBuf::from("/flag"),
                Origin::Flag("--state-dir")
            ))
        );
    }

    #[test]
    fn a_flag_equal_to_its_variable_is_still_the_flag() {
        let args = parse(&["--cpus", "3", "--outpost", "op"]);
        let h = host(&[("SANDBOX_CPUS", "3"), ("OUTPOST_ID", "op")]);
        let raw = args.to_raw(&h);
        assert_eq!(raw.cpus.map(|c| c.origin), Some(Origin::Flag("--cpus")));
        assert_eq!(
            raw.outposts.map(|o| o.origin),
            Some(Origin::Flag("--outpost"))
        );
    }

    #[test]
    fn the_configuration_file_is_named_by_the_flag_else_the_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.toml");
        let missing = missing.to_str().expect("utf-8");
        let h = host(&[
            ("GARRISON_CONFIG_FILE", missing),
            ("GARRISON_CONFIG", dir.path().to_str().expect("utf-8")),
        ]);
        let from_env = file_layer(None, &h).expect_err("missing");
        assert_eq!(
            from_env.to_string(),
            format!("invalid GARRISON_CONFIG_FILE (environment): {missing} does not exist")
        );
        let from_flag = file_layer(Some(Path::new(missing)), &h).expect_err("missing");
        assert_eq!(
            from_flag.to_string(),
            format!("invalid --config: {missing} does not exist")
        );
        // Neither: the default file, absent here, is no error.
        let h = host(&[("GARRISON_CONFIG", dir.path().to_str().expect("utf-8"))]);
        assert!(file_layer(None, &h).is_ok());
    }

    #[test]
    fn the_token_is_taken_from_the_environment_only() {
        let h = host(&[(settings::TOKEN_ENV, "cog_x")]);
        let raw = parse(&[]).to_raw(&h);
        assert_eq!(
            raw.token.map(|t| t.origin),
            Some(Origin::Env(settings::TOKEN_ENV))
        );
        assert!(Cli::try_parse_from(["garrison", "serve", "--token", "cog_x"]).is_err());
    }
}
