//! The command line of `garrison serve`, and its flag layer of the
//! settings (how it becomes a [`ServeConfig`] is [`super::resolve`]).
//!
//! clap reads the flags only: the environment layer is
//! [`RawSettings::from_env`], so each value's origin is where it was read
//! (`--cpus`, or `SANDBOX_CPUS (environment)`), never inferred. `--help`
//! still names each setting's variable ([`with_environment_variable`]).
//! Numbers stay text here: they are checked in [`orchestrator::settings`],
//! where an error can say which flag, variable or file key held the bad
//! value.

use std::path::PathBuf;

use clap::Args;
#[cfg(doc)]
use orchestrator::settings::ServeConfig;
use orchestrator::settings::{HostEnv, RawSettings, Setting, names};

use super::backend_flags::{BackendFlags, backend_flag_settings};
#[cfg(doc)]
use super::flags::with_environment_variable;
use super::flags::{flag, setting_help};

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
    #[arg(long, value_name = "MIB")]
    pub state_dir_min_free_mb: Option<String>,
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
            state_dir_min_free_mb: text(&self.state_dir_min_free_mb, names::STATE_DIR_MIN_FREE_MB),
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
