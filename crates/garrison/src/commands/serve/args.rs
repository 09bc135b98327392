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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use orchestrator::settings::ServeConfig;
use orchestrator::settings::{self, HostEnv, Names, Origin, RawSettings, Sourced, names};

use crate::logging::LogFormat;

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
#[derive(Args, Clone, Debug, PartialEq)]
#[command(after_help = after_help(), mut_args = with_environment_variable)]
pub struct ServeArgs {
    /// Outpost to serve; repeat or separate with commas for several
    /// [default: the file's [[outpost]] tables, else the one `garrison connect` saved]
    #[arg(long = "outpost", value_name = "ID")]
    pub outposts: Vec<String>,

    /// Devin API base, without /opbeta [default: https://api.devin.ai]
    #[arg(long, value_name = "URL")]
    pub api_url: Option<String>,

    /// This worker's identity when claiming sessions, 1-128 of [A-Za-z0-9._-]
    /// [default: generated once and kept in the state directory]
    #[arg(long, value_name = "ID")]
    pub acceptor_id: Option<String>,

    /// Where devin-remote is downloaded from
    /// [default: https://static.devin.ai/devin-rs/remote/]
    #[arg(long, value_name = "URL")]
    pub static_base_url: Option<String>,

    #[arg(
        long,
        value_name = "KIND",
        help = format!(
            "Sandbox backend: {} [default: {}]",
            crate::backends::help(),
            orchestrator::settings::DEFAULT_BACKEND
        )
    )]
    pub backend: Option<String>,

    /// Sessions run at once, per outpost, 1-10000 [default: 5]
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<String>,

    /// Database, session logs and caches
    /// [default: /var/lib/garrison as root, else ~/.local/share/garrison]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Where snapshots are kept; may be shared by several Garrisons
    /// [default: <state-dir>/snapshots]
    #[arg(long, value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,

    /// Where snapshots are kept instead: a directory, or an object store
    /// every host reaches (s3://BUCKET/PREFIX, gs://…, az://…; credentials
    /// and endpoint from AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, … only)
    /// [default: the snapshot directory]
    #[arg(long, value_name = "DIR|URL")]
    pub snapshot_store: Option<String>,

    /// A file (mode 0600) holding the key that encrypts snapshots in the
    /// object store: 64 hex digits; or set GARRISON_SNAPSHOT_KEY
    #[arg(long, value_name = "FILE")]
    pub snapshot_key_file: Option<PathBuf>,

    /// When a snapshot fails its integrity check: fail the session and keep
    /// the snapshot, or start it fresh [default: fail]
    #[arg(long, value_name = "fail|fresh")]
    pub snapshot_integrity_fallback: Option<String>,

    /// How long snapshots are kept: 30d, 12h, 90m, 3600s or unlimited [default: 30d]
    #[arg(long, value_name = "DURATION")]
    pub snapshot_retention: Option<String>,

    /// Seconds between full re-lists of the queue, 1-3600 [default: 30]
    #[arg(long, value_name = "SECS")]
    pub relist_interval_secs: Option<String>,

    /// On SIGTERM, wait for running sessions to end instead of leaving them
    #[arg(long)]
    pub drain: bool,

    /// vCPUs per session sandbox, more than 0 and at most 256 [default: 2]
    #[arg(long, value_name = "N")]
    pub cpus: Option<String>,

    /// Memory per session sandbox in MiB, at least 128 [default: 8192]
    #[arg(long, value_name = "MIB")]
    pub memory_mb: Option<String>,

    /// Disk per session sandbox in MiB, at least 256 [default: 10240]
    #[arg(long, value_name = "MIB")]
    pub disk_mb: Option<String>,

    /// Sandbox image [default: the backend's]
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,

    /// Restarts of a crashing remote before the session is given up, 0-100 [default: 3]
    #[arg(long, value_name = "N")]
    pub max_restarts: Option<String>,

    /// Seconds a remote of a suspended session may take to exit by itself
    /// before it is killed, 10-86400 [default: 120]
    #[arg(long, value_name = "SECS")]
    pub suspend_exit_grace_secs: Option<String>,

    /// Gateway URL for a claim that carries none (Devin's `--gateway-url`) [env: DEVIN_OUTPOST_GATEWAY_URL]
    #[arg(long, value_name = "URL")]
    pub gateway_url: Option<String>,

    /// Output of a session's remote copied into its log, in MiB; past it the
    /// log says so and stops growing, 1-1048576 [default: 256]
    #[arg(long, value_name = "MIB")]
    pub session_log_max_mb: Option<String>,

    /// Repositories cloned into each new sandbox; repeat or separate with commas
    #[arg(long = "repos", value_name = "URLS")]
    pub repos: Vec<String>,

    /// User name for cloning private repositories with GIT_TOKEN [default: x-access-token]
    #[arg(long, value_name = "NAME")]
    pub git_username: Option<String>,

    /// TOML settings file [default: $GARRISON_CONFIG/garrison.toml, if it exists]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Log line format
    #[arg(long, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub log_format: LogFormat,

    /// Address of the admin listener (health, metrics)
    #[arg(long, default_value = "127.0.0.1:9180", value_name = "ADDR")]
    pub listen: SocketAddr,
}

impl ServeArgs {
    /// The flag layer and the environment layer, merged (flags first).
    pub fn to_raw(&self, host: &HostEnv) -> RawSettings {
        self.flag_layer().or(RawSettings::from_env(host))
    }

    /// The values given as flags, and only those.
    pub fn flag_layer(&self) -> RawSettings {
        let text = |value: &Option<String>, names: Names| Some(flag(value.clone()?, names));
        let list = |values: &[String], names: Names| {
            (!values.is_empty()).then(|| flag(values.to_vec(), names))
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
            drain: self.drain.then(|| flag(true, names::DRAIN)),
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
            // Tensorlake's settings have no flags (the key never in argv).
            ..RawSettings::default()
        }
    }
}

fn flag<T>(value: T, names: Names) -> Sourced<T> {
    Sourced::new(value, Origin::Flag(names.flag))
}

/// Ends the help of a setting's flag with its environment variable, as
/// clap's own `env` would show it, from [`names::ALL`] (so the two cannot
/// drift). Flags that are not settings, or have no variable, are left as
/// they are.
pub fn with_environment_variable(arg: clap::Arg) -> clap::Arg {
    let Some(var) = names::ALL
        .iter()
        .find(|names| arg.get_long() == Some(names.flag.trim_start_matches("--")))
        .and_then(|names| names.env)
    else {
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
pub fn file_layer(config_flag: Option<&Path>, host: &HostEnv) -> anyhow::Result<RawSettings> {
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
            .with_context(|| format!("{}: {} does not exist", path.origin, path.value.display()));
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
pub fn resolve(args: &ServeArgs) -> anyhow::Result<ServeConfig> {
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

    Ok(settings::resolve(
        args.to_raw(&host).or(file),
        stored,
        &host,
        &crate::backends::ALL,
    )?)
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
        for names in names::ALL {
            let entry = entries
                .iter()
                .find(|e| e.split_whitespace().next() == Some(names.flag))
                .unwrap_or_else(|| panic!("--help has no flag {}", names.flag));
            match names.env {
                Some(var) => assert!(
                    entry.contains(&format!("[env: {var}]")),
                    "--help of {} lacks [env: {var}]: {entry}",
                    names.flag
                ),
                None => assert!(!entry.contains("[env:"), "{entry}"),
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
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.listen, "0.0.0.0:9999".parse().expect("addr"));
    }

    #[test]
    fn log_format_and_listen_have_defaults() {
        let args = parse(&[]);
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.listen, "127.0.0.1:9180".parse().expect("addr"));
        assert!(Cli::try_parse_from(["garrison", "serve", "--listen", "nowhere"]).is_err());
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
        assert!(
            from_env
                .to_string()
                .starts_with("GARRISON_CONFIG_FILE (environment): "),
            "{from_env}"
        );
        let from_flag = file_layer(Some(Path::new(missing)), &h).expect_err("missing");
        assert!(
            from_flag.to_string().starts_with("--config: "),
            "{from_flag}"
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
