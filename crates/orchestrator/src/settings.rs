//! Where `garrison serve` gets its settings, and how they are checked.
//!
//! Three layers, highest first: command-line flags, the environment, and a
//! TOML file; below them, built-in defaults. Each layer is read into a
//! [`RawSettings`], whose fields are all optional and tagged with their
//! [`Origin`], so merging is `flags.or(env).or(file)` and an error can name
//! the exact flag, variable or file key that was wrong. [`resolve`] turns the
//! merged layer into a validated [`ServeConfig`].
//!
//! The names follow `devin worker start` and the seed orchestrators
//! (`OUTPOST_ID`, `MAX_CONCURRENT_SESSIONS`, `SANDBOX_CPUS`, ...) so their
//! users feel at home; they are listed once, in [`names`].
//!
//! The token never comes from a flag, because argv is visible to every user
//! of the machine: it is read from `DEVIN_OUTPOSTS_TOKEN`, else from the
//! credentials file that `garrison connect` writes ([`save_credentials`]).
//!
//! Nothing here reads the process environment except [`HostEnv::current`]
//! and [`credentials_path`]: the logic takes a [`HostEnv`], so tests pass a
//! map instead of mutating global state.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::ops::RangeInclusive;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet::{Platform, Secret};
use sandbox::Resources;
use serde::{Deserialize, Serialize};

use crate::config::Repos;
use crate::config::{
    BackendKind, DEFAULT_API_URL, DEFAULT_MAX_CONCURRENT, DEFAULT_RELIST_INTERVAL,
    DEFAULT_SANDBOX_TIMEOUT_SECS, DEFAULT_SNAPSHOT_RETENTION, DEFAULT_STATIC_BASE_URL,
    OutpostConfig, QueueMode, ServeConfig, TensorlakeSettings,
};
use crate::planner::Policy;
use crate::repos::GIT_TOKEN_ENV;

pub mod modal;

/// The backend used when none is configured: a container per session on
/// this machine. `host` (no isolation) must be asked for.
pub const DEFAULT_BACKEND: BackendKind = BackendKind::Local;
/// Restarts of a crashing remote before the session is given up.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;
/// The environment variable holding the Devin token.
pub const TOKEN_ENV: &str = "DEVIN_OUTPOSTS_TOKEN";
/// The environment variable naming the configuration directory.
pub const CONFIG_DIR_ENV: &str = "GARRISON_CONFIG";
/// The TOML file read from the configuration directory when `--config` is
/// not given.
pub const CONFIG_FILE_NAME: &str = "garrison.toml";
/// The file `garrison connect` writes in the configuration directory.
pub const CREDENTIALS_FILE_NAME: &str = "credentials.json";

const RETENTION_EXAMPLES: &str = "e.g. \"30d\", \"12h\", \"90m\", \"3600s\" or \"unlimited\"";

// ---------------------------------------------------------------------------
// Names and origins
// ---------------------------------------------------------------------------

/// The spellings of one setting in each layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Names {
    /// The long flag, e.g. `--cpus`.
    pub flag: &'static str,
    /// The environment variable, if the setting has one.
    pub env: Option<&'static str>,
    /// The key in the TOML file.
    pub key: &'static str,
}

/// Every setting's names, in one place (the `garrison serve` flags are
/// checked against this list by a test).
pub mod names {
    use super::Names;

    const fn n(flag: &'static str, env: Option<&'static str>, key: &'static str) -> Names {
        Names { flag, env, key }
    }

    pub const OUTPOST: Names = n("--outpost", Some("OUTPOST_ID"), "outpost");
    pub const API_URL: Names = n("--api-url", Some("DEVIN_API_URL"), "api_url");
    pub const ACCEPTOR_ID: Names = n(
        "--acceptor-id",
        Some("DEVIN_WORKER_ACCEPTOR_ID"),
        "acceptor_id",
    );
    pub const STATIC_BASE_URL: Names = n(
        "--static-base-url",
        Some("DEVIN_WORKER_STATIC_BASE_URL"),
        "static_base_url",
    );
    pub const BACKEND: Names = n("--backend", Some("GARRISON_BACKEND"), "backend");
    pub const MAX_CONCURRENT: Names = n(
        "--max-concurrent",
        Some("MAX_CONCURRENT_SESSIONS"),
        "max_concurrent",
    );
    pub const STATE_DIR: Names = n("--state-dir", Some("GARRISON_HOME"), "state_dir");
    pub const SNAPSHOT_DIR: Names = n(
        "--snapshot-dir",
        Some("GARRISON_SNAPSHOT_DIR"),
        "snapshot_dir",
    );
    pub const SNAPSHOT_RETENTION: Names = n(
        "--snapshot-retention",
        Some("SNAPSHOT_RETENTION"),
        "snapshot_retention",
    );
    pub const RELIST_INTERVAL_SECS: Names =
        n("--relist-interval-secs", None, "relist_interval_secs");
    pub const DRAIN: Names = n("--drain", None, "drain");
    pub const CPUS: Names = n("--cpus", Some("SANDBOX_CPUS"), "cpus");
    pub const MEMORY_MB: Names = n("--memory-mb", Some("SANDBOX_MEMORY_MB"), "memory_mb");
    pub const DISK_MB: Names = n("--disk-mb", Some("SANDBOX_DISK_MB"), "disk_mb");
    pub const IMAGE: Names = n("--image", Some("SANDBOX_IMAGE"), "image");
    pub const MAX_RESTARTS: Names = n("--max-restarts", None, "max_restarts");
    pub const CONFIG: Names = n("--config", Some("GARRISON_CONFIG_FILE"), "config");
    pub const REPOS: Names = n("--repos", Some("REPOS"), "repos");
    pub const GIT_USERNAME: Names = n("--git-username", Some("GIT_USERNAME"), "git_username");

    /// A setting read from the environment and the file only.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct EnvKey {
        pub env: &'static str,
        pub key: &'static str,
    }

    /// The Tensorlake backend's settings. They have no flags: the API key
    /// must never be in argv, and the rest are set once per host.
    pub mod tensorlake {
        use super::EnvKey;

        /// The API key itself: the environment only, like the Devin token.
        pub const API_KEY_ENV: &str = "TENSORLAKE_API_KEY";
        /// A file (mode 0600) holding the API key, if the variable is unset.
        pub const API_KEY_FILE: EnvKey = EnvKey {
            env: "TENSORLAKE_API_KEY_FILE",
            key: "tensorlake_api_key_file",
        };
        pub const API_URL: EnvKey = EnvKey {
            env: "TENSORLAKE_API_URL",
            key: "tensorlake_api_url",
        };
        /// The image sessions boot from when the outpost names none.
        pub const IMAGE: EnvKey = EnvKey {
            env: "TENSORLAKE_IMAGE",
            key: "tensorlake_image",
        };
        /// Idle seconds before Tensorlake suspends a session's sandbox.
        pub const TIMEOUT_SECS: EnvKey = EnvKey {
            env: "SANDBOX_TIMEOUT_SECS",
            key: "sandbox_timeout_secs",
        };
        /// Where Garrison keeps its directories inside the sandbox.
        pub const SANDBOX_ROOT: EnvKey = EnvKey {
            env: "TENSORLAKE_SANDBOX_ROOT",
            key: "tensorlake_sandbox_root",
        };
    }

    /// Everything that is a flag of `garrison serve`.
    pub const ALL: &[Names] = &[
        OUTPOST,
        API_URL,
        ACCEPTOR_ID,
        STATIC_BASE_URL,
        BACKEND,
        MAX_CONCURRENT,
        STATE_DIR,
        SNAPSHOT_DIR,
        SNAPSHOT_RETENTION,
        RELIST_INTERVAL_SECS,
        DRAIN,
        CPUS,
        MEMORY_MB,
        DISK_MB,
        IMAGE,
        MAX_RESTARTS,
        CONFIG,
        REPOS,
        GIT_USERNAME,
    ];
}

/// Where a value came from; its `Display` is the name a user would look
/// for, e.g. `SANDBOX_CPUS (environment)` or `cpus in /etc/garrison/garrison.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag, e.g. `--cpus`.
    Flag(&'static str),
    /// An environment variable, e.g. `SANDBOX_CPUS`.
    Env(&'static str),
    /// A key of the TOML file; `outpost` is the id of the `[[outpost]]`
    /// table holding it, if any.
    File {
        path: PathBuf,
        key: &'static str,
        outpost: Option<String>,
    },
    /// A field of the credentials file.
    Credentials { path: PathBuf, key: &'static str },
}

impl Origin {
    fn file(path: &Path, key: &'static str, outpost: Option<&str>) -> Self {
        Self::File {
            path: path.to_owned(),
            key,
            outpost: outpost.map(str::to_owned),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag(flag) => f.write_str(flag),
            Self::Env(var) => write!(f, "{var} (environment)"),
            Self::File {
                path,
                key,
                outpost: None,
            } => write!(f, "{key} in {}", path.display()),
            Self::File {
                path,
                key,
                outpost: Some(id),
            } => write!(f, "{key} of [[outpost]] {id:?} in {}", path.display()),
            Self::Credentials { path, key } => write!(f, "{key} in {}", path.display()),
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub origin: Origin,
}

impl<T> Sourced<T> {
    pub fn new(value: T, origin: Origin) -> Self {
        Self { value, origin }
    }

    fn invalid(&self, reason: impl Into<String>) -> SettingsError {
        SettingsError::Invalid {
            origin: self.origin.clone(),
            reason: reason.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why the settings could not be read or resolved. Every message names the
/// setting and where it came from; none ever contains the token.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A value was given but is not acceptable.
    #[error("invalid {origin}: {reason}")]
    Invalid { origin: Origin, reason: String },
    /// A file could not be parsed; `reason` names the key or position.
    #[error("invalid {}: {reason}", path.display())]
    Parse { path: PathBuf, reason: String },
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    #[error("cannot write {}: {error}", path.display())]
    Write { path: PathBuf, error: io::Error },
    /// The credentials file grants access to other users.
    #[error(
        "refusing to read {path}: its mode {mode:04o} lets other users read or change it; \
         run `chmod 600 {path}`",
        path = path.display()
    )]
    InsecureCredentials { path: PathBuf, mode: u32 },
    #[error(
        "no outpost to serve: pass --outpost, set OUTPOST_ID, add an [[outpost]] table, \
         or run `garrison connect`"
    )]
    NoOutpost,
    #[error("no Devin token: set DEVIN_OUTPOSTS_TOKEN or run `garrison connect`")]
    NoToken,
    #[error(
        "the tensorlake backend needs an API key: set TENSORLAKE_API_KEY, or \
         TENSORLAKE_API_KEY_FILE to a file of mode 0600 holding it"
    )]
    NoTensorlakeKey,
    /// A default directory depends on `HOME`, which is not set.
    #[error("cannot choose the {what}: HOME is not set; {hint}")]
    NoHome {
        what: &'static str,
        hint: &'static str,
    },
}

// ---------------------------------------------------------------------------
// The host: user and environment
// ---------------------------------------------------------------------------

/// What defaults depend on: the effective user and the environment. Gathered
/// once at the edge ([`HostEnv::current`]) so the logic here stays pure.
#[derive(Clone)]
pub struct HostEnv {
    /// Effective user id; 0 selects the system-wide directories.
    pub euid: u32,
    /// Environment variables (may include the token: see the `Debug` impl).
    pub vars: BTreeMap<String, String>,
}

impl fmt::Debug for HostEnv {
    /// Names only: the values include `DEVIN_OUTPOSTS_TOKEN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostEnv")
            .field("euid", &self.euid)
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl HostEnv {
    pub fn new(euid: u32, vars: BTreeMap<String, String>) -> Self {
        Self { euid, vars }
    }

    /// This process's effective user and environment. Variables that are
    /// not valid UTF-8 are left out.
    pub fn current() -> Self {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self {
            euid: current_euid(),
            vars,
        }
    }

    /// A variable's value; an empty variable counts as unset, as in the
    /// seeds' `.env` templates (`OUTPOST_ID=` means "not set yet").
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn is_root(&self) -> bool {
        self.euid == 0
    }

    /// An XDG base directory; the spec says relative values are ignored.
    fn xdg_dir(&self, name: &str) -> Option<PathBuf> {
        self.var(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }

    fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// `$GARRISON_CONFIG`, else `/etc/garrison` as root, else
    /// `$XDG_CONFIG_HOME/garrison` or `~/.config/garrison`.
    pub fn config_dir(&self) -> Result<PathBuf, SettingsError> {
        if let Some(dir) = self.var(CONFIG_DIR_ENV) {
            return Ok(PathBuf::from(dir));
        }
        if self.is_root() {
            return Ok(PathBuf::from("/etc/garrison"));
        }
        if let Some(dir) = self.xdg_dir("XDG_CONFIG_HOME") {
            return Ok(dir.join("garrison"));
        }
        self.home()
            .map(|home| home.join(".config/garrison"))
            .ok_or(SettingsError::NoHome {
                what: "configuration directory",
                hint: "set GARRISON_CONFIG",
            })
    }

    /// `/var/lib/garrison` as root, else `$XDG_DATA_HOME/garrison` or
    /// `~/.local/share/garrison`. (`GARRISON_HOME` is the `--state-dir`
    /// setting itself, read with the other settings.)
    pub fn default_state_dir(&self) -> Result<PathBuf, SettingsError> {
        if self.is_root() {
            return Ok(PathBuf::from("/var/lib/garrison"));
        }
        if let Some(dir) = self.xdg_dir("XDG_DATA_HOME") {
            return Ok(dir.join("garrison"));
        }
        self.home()
            .map(|home| home.join(".local/share/garrison"))
            .ok_or(SettingsError::NoHome {
                what: "state directory",
                hint: "pass --state-dir or set GARRISON_HOME",
            })
    }

    /// `<config dir>/credentials.json`.
    pub fn credentials_path(&self) -> Result<PathBuf, SettingsError> {
        Ok(self.config_dir()?.join(CREDENTIALS_FILE_NAME))
    }

    /// `<config dir>/garrison.toml`, read when `--config` is not given.
    pub fn config_file_path(&self) -> Result<PathBuf, SettingsError> {
        Ok(self.config_dir()?.join(CONFIG_FILE_NAME))
    }
}

/// The effective uid, from `/proc/self/status` (this crate has no libc
/// binding). Where that is unreadable (not Linux), the user is taken not to
/// be root: the per-user directories are the safer guess.
fn current_euid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            // "Uid:\t<real>\t<effective>\t<saved>\t<fs>"
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(2)?.parse().ok()
        })
        .unwrap_or(u32::MAX)
}

/// Where `garrison connect` saves the token for this user:
/// `$GARRISON_CONFIG/credentials.json` (see [`HostEnv::config_dir`]).
pub fn credentials_path() -> Result<PathBuf, SettingsError> {
    HostEnv::current().credentials_path()
}

// ---------------------------------------------------------------------------
// One layer
// ---------------------------------------------------------------------------

/// One layer of settings (flags, environment or file), every field optional.
///
/// Numbers are kept as text until [`resolve`], so a bad value is reported
/// only if it wins the merge, and with its origin. Every layer uses the same
/// type; fields a layer cannot set stay `None` (the token is only ever set
/// by [`RawSettings::from_env`], `[[outpost]]` tables only by the file).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawSettings {
    /// Outpost ids; each item may hold several, comma-separated.
    pub outposts: Option<Sourced<Vec<String>>>,
    pub api_url: Option<Sourced<String>>,
    pub acceptor_id: Option<Sourced<String>>,
    pub static_base_url: Option<Sourced<String>>,
    pub backend: Option<Sourced<String>>,
    pub max_concurrent: Option<Sourced<String>>,
    pub state_dir: Option<Sourced<PathBuf>>,
    pub snapshot_dir: Option<Sourced<PathBuf>>,
    pub snapshot_retention: Option<Sourced<String>>,
    pub relist_interval_secs: Option<Sourced<String>>,
    pub drain: Option<Sourced<bool>>,
    pub cpus: Option<Sourced<String>>,
    pub memory_mb: Option<Sourced<String>>,
    pub disk_mb: Option<Sourced<String>>,
    pub image: Option<Sourced<String>>,
    pub max_restarts: Option<Sourced<String>>,
    /// Only from the environment; `Secret` keeps it out of `Debug`.
    pub token: Option<Sourced<Secret>>,
    /// Clone URLs; each item may hold several, comma-separated.
    pub repos: Option<Sourced<Vec<String>>>,
    pub git_username: Option<Sourced<String>>,
    /// `GIT_TOKEN`: only from the environment, like `token`.
    pub git_token: Option<Sourced<Secret>>,
    /// `TENSORLAKE_API_KEY`: only from the environment, like `token`.
    pub tensorlake_api_key: Option<Sourced<Secret>>,
    pub tensorlake_api_key_file: Option<Sourced<PathBuf>>,
    pub tensorlake_api_url: Option<Sourced<String>>,
    pub tensorlake_image: Option<Sourced<String>>,
    pub sandbox_timeout_secs: Option<Sourced<String>>,
    pub tensorlake_sandbox_root: Option<Sourced<String>>,
    /// The file's `[[outpost]]` tables, in file order.
    pub outpost_tables: Vec<OutpostTable>,
}

/// One `[[outpost]]` table: per-outpost overrides of the top-level settings.
#[derive(Clone, Debug, PartialEq)]
pub struct OutpostTable {
    pub id: Sourced<String>,
    pub backend: Option<Sourced<String>>,
    pub max_concurrent: Option<Sourced<String>>,
    pub cpus: Option<Sourced<String>>,
    pub memory_mb: Option<Sourced<String>>,
    pub disk_mb: Option<Sourced<String>>,
    pub image: Option<Sourced<String>>,
    pub platform: Option<Sourced<String>>,
    pub repos: Option<Sourced<Vec<String>>>,
}

impl RawSettings {
    /// This layer over `lower`: each field is this layer's if set, else
    /// `lower`'s.
    #[must_use]
    pub fn or(self, lower: RawSettings) -> RawSettings {
        RawSettings {
            outposts: self.outposts.or(lower.outposts),
            api_url: self.api_url.or(lower.api_url),
            acceptor_id: self.acceptor_id.or(lower.acceptor_id),
            static_base_url: self.static_base_url.or(lower.static_base_url),
            backend: self.backend.or(lower.backend),
            max_concurrent: self.max_concurrent.or(lower.max_concurrent),
            state_dir: self.state_dir.or(lower.state_dir),
            snapshot_dir: self.snapshot_dir.or(lower.snapshot_dir),
            snapshot_retention: self.snapshot_retention.or(lower.snapshot_retention),
            relist_interval_secs: self.relist_interval_secs.or(lower.relist_interval_secs),
            drain: self.drain.or(lower.drain),
            cpus: self.cpus.or(lower.cpus),
            memory_mb: self.memory_mb.or(lower.memory_mb),
            disk_mb: self.disk_mb.or(lower.disk_mb),
            image: self.image.or(lower.image),
            max_restarts: self.max_restarts.or(lower.max_restarts),
            token: self.token.or(lower.token),
            repos: self.repos.or(lower.repos),
            git_username: self.git_username.or(lower.git_username),
            tensorlake_api_key: self.tensorlake_api_key.or(lower.tensorlake_api_key),
            tensorlake_api_key_file: self
                .tensorlake_api_key_file
                .or(lower.tensorlake_api_key_file),
            tensorlake_api_url: self.tensorlake_api_url.or(lower.tensorlake_api_url),
            tensorlake_image: self.tensorlake_image.or(lower.tensorlake_image),
            sandbox_timeout_secs: self.sandbox_timeout_secs.or(lower.sandbox_timeout_secs),
            tensorlake_sandbox_root: self
                .tensorlake_sandbox_root
                .or(lower.tensorlake_sandbox_root),
            git_token: self.git_token.or(lower.git_token),
            outpost_tables: if self.outpost_tables.is_empty() {
                lower.outpost_tables
            } else {
                self.outpost_tables
            },
        }
    }

    /// The environment layer. Empty variables count as unset.
    pub fn from_env(host: &HostEnv) -> RawSettings {
        let text = |names: Names| {
            let var = names.env?;
            Some(Sourced::new(host.var(var)?.to_owned(), Origin::Env(var)))
        };
        let path =
            |names: Names| text(names).map(|s| Sourced::new(PathBuf::from(s.value), s.origin));
        let env_key = |names: names::EnvKey| {
            Some(Sourced::new(
                host.var(names.env)?.to_owned(),
                Origin::Env(names.env),
            ))
        };
        RawSettings {
            outposts: text(names::OUTPOST).map(|s| Sourced::new(vec![s.value], s.origin)),
            api_url: text(names::API_URL),
            acceptor_id: text(names::ACCEPTOR_ID),
            static_base_url: text(names::STATIC_BASE_URL),
            backend: text(names::BACKEND),
            max_concurrent: text(names::MAX_CONCURRENT),
            state_dir: path(names::STATE_DIR),
            snapshot_dir: path(names::SNAPSHOT_DIR),
            snapshot_retention: text(names::SNAPSHOT_RETENTION),
            relist_interval_secs: text(names::RELIST_INTERVAL_SECS),
            drain: None,
            cpus: text(names::CPUS),
            memory_mb: text(names::MEMORY_MB),
            disk_mb: text(names::DISK_MB),
            image: text(names::IMAGE),
            max_restarts: text(names::MAX_RESTARTS),
            token: host
                .var(TOKEN_ENV)
                .map(|t| Sourced::new(Secret::new(t), Origin::Env(TOKEN_ENV))),
            repos: text(names::REPOS).map(|s| Sourced::new(vec![s.value], s.origin)),
            git_username: text(names::GIT_USERNAME),
            git_token: host
                .var(GIT_TOKEN_ENV)
                .map(|t| Sourced::new(Secret::new(t), Origin::Env(GIT_TOKEN_ENV))),
            tensorlake_api_key: host
                .var(names::tensorlake::API_KEY_ENV)
                .map(|t| Sourced::new(Secret::new(t), Origin::Env(names::tensorlake::API_KEY_ENV))),
            tensorlake_api_key_file: env_key(names::tensorlake::API_KEY_FILE)
                .map(|s| Sourced::new(PathBuf::from(s.value), s.origin)),
            tensorlake_api_url: env_key(names::tensorlake::API_URL),
            tensorlake_image: env_key(names::tensorlake::IMAGE),
            sandbox_timeout_secs: env_key(names::tensorlake::TIMEOUT_SECS),
            tensorlake_sandbox_root: env_key(names::tensorlake::SANDBOX_ROOT),
            outpost_tables: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// The TOML file
// ---------------------------------------------------------------------------

/// `garrison.toml` as written. Unknown keys are errors: a typo such as
/// `max_concurent` must not be silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    api_url: Option<String>,
    acceptor_id: Option<String>,
    static_base_url: Option<String>,
    backend: Option<String>,
    max_concurrent: Option<i64>,
    state_dir: Option<PathBuf>,
    snapshot_dir: Option<PathBuf>,
    snapshot_retention: Option<String>,
    relist_interval_secs: Option<i64>,
    cpus: Option<f64>,
    memory_mb: Option<i64>,
    disk_mb: Option<i64>,
    image: Option<String>,
    max_restarts: Option<i64>,
    repos: Option<Vec<String>>,
    git_username: Option<String>,
    tensorlake_api_key_file: Option<PathBuf>,
    tensorlake_api_url: Option<String>,
    tensorlake_image: Option<String>,
    sandbox_timeout_secs: Option<i64>,
    tensorlake_sandbox_root: Option<String>,
    #[serde(default)]
    outpost: Vec<FileOutpost>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOutpost {
    id: String,
    backend: Option<String>,
    max_concurrent: Option<i64>,
    cpus: Option<f64>,
    memory_mb: Option<i64>,
    disk_mb: Option<i64>,
    image: Option<String>,
    platform: Option<String>,
    repos: Option<Vec<String>>,
}

/// Reads the TOML file at `path`; `Ok(None)` if it does not exist.
pub fn load_file(path: &Path) -> Result<Option<RawSettings>, SettingsError> {
    match fs::read_to_string(path) {
        Ok(text) => parse_file(path, &text).map(Some),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(SettingsError::Read {
            path: path.to_owned(),
            error,
        }),
    }
}

/// Parses the TOML file's text; `path` is only used to name origins.
pub fn parse_file(path: &Path, text: &str) -> Result<RawSettings, SettingsError> {
    let file: FileSettings = toml::from_str(text).map_err(|e| SettingsError::Parse {
        path: path.to_owned(),
        reason: describe_toml_error(text, &e),
    })?;

    let at = |key: &'static str, outpost: Option<&str>| Origin::file(path, key, outpost);
    // Numbers become text, as in the other layers, so that one validation
    // path reports every range error with its origin.
    let text_of = |value: Option<String>, key, outpost: Option<&str>| {
        value.map(|v| Sourced::new(v, at(key, outpost)))
    };
    let num = |value: Option<i64>, key, outpost: Option<&str>| {
        value.map(|v| Sourced::new(v.to_string(), at(key, outpost)))
    };
    let float = |value: Option<f64>, key, outpost: Option<&str>| {
        value.map(|v| Sourced::new(v.to_string(), at(key, outpost)))
    };
    let dir = |value: Option<PathBuf>, key| value.map(|v| Sourced::new(v, at(key, None)));

    let outpost_tables = file
        .outpost
        .into_iter()
        .map(|t| {
            let id = Some(t.id.as_str());
            OutpostTable {
                backend: text_of(t.backend, "backend", id),
                max_concurrent: num(t.max_concurrent, "max_concurrent", id),
                cpus: float(t.cpus, "cpus", id),
                memory_mb: num(t.memory_mb, "memory_mb", id),
                disk_mb: num(t.disk_mb, "disk_mb", id),
                image: text_of(t.image, "image", id),
                platform: text_of(t.platform, "platform", id),
                repos: t.repos.map(|r| Sourced::new(r, at("repos", id))),
                id: Sourced::new(t.id.clone(), at("id", id)),
            }
        })
        .collect();

    Ok(RawSettings {
        outposts: None,
        api_url: text_of(file.api_url, "api_url", None),
        acceptor_id: text_of(file.acceptor_id, "acceptor_id", None),
        static_base_url: text_of(file.static_base_url, "static_base_url", None),
        backend: text_of(file.backend, "backend", None),
        max_concurrent: num(file.max_concurrent, "max_concurrent", None),
        state_dir: dir(file.state_dir, "state_dir"),
        snapshot_dir: dir(file.snapshot_dir, "snapshot_dir"),
        snapshot_retention: text_of(file.snapshot_retention, "snapshot_retention", None),
        relist_interval_secs: num(file.relist_interval_secs, "relist_interval_secs", None),
        drain: None,
        cpus: float(file.cpus, "cpus", None),
        memory_mb: num(file.memory_mb, "memory_mb", None),
        disk_mb: num(file.disk_mb, "disk_mb", None),
        image: text_of(file.image, "image", None),
        max_restarts: num(file.max_restarts, "max_restarts", None),
        token: None,
        repos: file.repos.map(|r| Sourced::new(r, at("repos", None))),
        git_username: text_of(file.git_username, "git_username", None),
        git_token: None,
        tensorlake_api_key: None,
        tensorlake_api_key_file: dir(file.tensorlake_api_key_file, "tensorlake_api_key_file"),
        tensorlake_api_url: text_of(file.tensorlake_api_url, "tensorlake_api_url", None),
        tensorlake_image: text_of(file.tensorlake_image, "tensorlake_image", None),
        sandbox_timeout_secs: num(file.sandbox_timeout_secs, "sandbox_timeout_secs", None),
        tensorlake_sandbox_root: text_of(
            file.tensorlake_sandbox_root,
            "tensorlake_sandbox_root",
            None,
        ),
        outpost_tables,
    })
}

/// "line L, column C: message". Built from the parts rather than the
/// error's `Display`, which quotes the offending source line: if someone
/// pasted a token into the file, that line would carry it into a log.
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let mut reason = error.message().trim().to_owned();
    if reason.contains("unknown field `token`") {
        reason.push_str(
            " (the token is read from DEVIN_OUTPOSTS_TOKEN or the credentials file, \
             never from this file)",
        );
    }
    if reason.contains("unknown field `tensorlake_api_key`") {
        reason.push_str(
            " (the Tensorlake API key is read from TENSORLAKE_API_KEY or the 0600 file named \
             by tensorlake_api_key_file, never from this file)",
        );
    }
    if reason.contains("unknown field `git_token`") {
        reason.push_str(
            " (the git token is read from GIT_TOKEN in the environment, never from this file)",
        );
    }
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {reason}")
        }
        None => reason,
    }
}

// ---------------------------------------------------------------------------
// Credentials
// ---------------------------------------------------------------------------

/// What `garrison connect` saves: `credentials.json`, mode 0600.
///
/// `api_url` and `outpost_id` are also the defaults for the API URL and the
/// outpost when no other layer sets them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The API base the token was issued by (without `/opbeta`).
    pub api_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outpost_id: Option<String>,
    /// Serialized as a plain string; `Debug` shows `[redacted]`.
    pub token: Secret,
}

/// The text of `path`, at most `limit` bytes, from a file only its owner
/// may read: one whose mode grants group or others anything is refused (a
/// secret readable by other users must be fixed, not used). The mode is
/// that of the file actually opened, not of whatever the path names by the
/// time anyone looks again.
pub(crate) fn read_owner_only(path: &Path, limit: u64) -> Result<String, SettingsError> {
    let read_error = |error| SettingsError::Read {
        path: path.to_owned(),
        error,
    };
    let file = fs::File::open(path).map_err(read_error)?;
    let mode = file.metadata().map_err(read_error)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(SettingsError::InsecureCredentials {
            path: path.to_owned(),
            mode: mode & 0o7777,
        });
    }
    let mut text = String::new();
    file.take(limit)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    Ok(text)
}

/// [`read_owner_only`] for a file that may not exist: `Ok(None)` then.
pub(crate) fn read_owner_only_if_present(
    path: &Path,
    limit: u64,
) -> Result<Option<String>, SettingsError> {
    match read_owner_only(path, limit) {
        Ok(text) => Ok(Some(text)),
        Err(SettingsError::Read { error, .. }) if error.kind() == io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Reads the credentials file; `Ok(None)` if there is none.
///
/// Refuses a file whose mode grants any permission to group or others: a
/// token readable by other users must be fixed, not used.
pub fn load_credentials(path: &Path) -> Result<Option<Credentials>, SettingsError> {
    let Some(text) = read_owner_only_if_present(path, u64::MAX)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| SettingsError::Parse {
            path: path.to_owned(),
            reason: describe_json_error(&e),
        })
}

/// serde_json's messages may quote a value ("invalid type: integer `123`"),
/// and the value could be the token: only messages known to name keys are
/// passed through.
fn describe_json_error(error: &serde_json::Error) -> String {
    let (line, column) = (error.line(), error.column());
    let message = error.to_string();
    if message.starts_with("missing field") {
        // "missing field `token` at line 1 column 2"
        return message;
    }
    match error.classify() {
        serde_json::error::Category::Data => format!(
            "unexpected value at line {line} column {column}: expected {{\"api_url\": \"...\", \
             \"outpost_id\": \"...\", \"token\": \"...\"}}"
        ),
        _ => format!("not valid JSON (line {line} column {column})"),
    }
}

/// Writes the credentials file atomically: the parent directory is created
/// with mode 0700, the content goes to a temporary file created with mode
/// 0600 (never wider, not even for an instant), which is then renamed over
/// `path`.
pub fn save_credentials(path: &Path, credentials: &Credentials) -> Result<(), SettingsError> {
    let write_error = |error| SettingsError::Write {
        path: path.to_owned(),
        error,
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| write_error(io::Error::other("not a file path")))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(write_error)?;

    let mut json =
        serde_json::to_vec_pretty(credentials).map_err(|e| write_error(io::Error::other(e)))?;
    json.push(b'\n');

    let tmp = dir.join(format!(
        ".{}.{}.{:016x}.tmp",
        file_name.to_string_lossy(),
        std::process::id(),
        rand::random::<u64>()
    ));
    let written = (|| {
        // create_new: never write through a stale or planted file or symlink.
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&json)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(error) = written {
        let _ = fs::remove_file(&tmp);
        return Err(write_error(error));
    }
    // Make the rename itself durable; best effort, as not every filesystem
    // can sync a directory.
    if let Ok(dir) = fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Resolution
// ---------------------------------------------------------------------------

/// Validates the merged layers and fills in defaults.
///
/// `credentials` is the credentials file and where it was read from: it
/// supplies the token if `DEVIN_OUTPOSTS_TOKEN` is unset, and the API URL
/// and outpost if no layer sets them. `host` supplies the default state
/// directory.
///
/// Outposts: `--outpost`/`OUTPOST_ID` if given (an `[[outpost]]` table with
/// the same id still supplies that outpost's overrides; other tables are not
/// served), else the file's `[[outpost]]` tables, else the credentials'
/// `outpost_id`. A table's settings beat the top-level ones whatever layer
/// those came from: they are the more specific.
pub fn resolve(
    raw: RawSettings,
    credentials: Option<(&Path, &Credentials)>,
    host: &HostEnv,
) -> Result<ServeConfig, SettingsError> {
    let api_url = match (&raw.api_url, credentials) {
        (Some(value), _) => api_url(value)?,
        (None, Some((path, c))) => api_url(&Sourced::new(
            c.api_url.clone(),
            Origin::Credentials {
                path: path.to_owned(),
                key: "api_url",
            },
        ))?,
        (None, None) => DEFAULT_API_URL.to_owned(),
    };
    let token = token(raw.token.as_ref(), credentials)?;
    let acceptor_id = raw.acceptor_id.as_ref().map(acceptor_id).transpose()?;
    let static_base_url = match &raw.static_base_url {
        Some(value) => static_base_url(value)?,
        None => DEFAULT_STATIC_BASE_URL.to_owned(),
    };
    let state_dir = match &raw.state_dir {
        Some(value) => directory(value)?,
        None => host.default_state_dir()?,
    };
    let snapshot_dir = match &raw.snapshot_dir {
        Some(value) => directory(value)?,
        None => state_dir.join("snapshots"),
    };
    let snapshot_retention = match &raw.snapshot_retention {
        Some(value) => parse_retention(&value.value).map_err(|reason| value.invalid(reason))?,
        None => Some(DEFAULT_SNAPSHOT_RETENTION),
    };
    let relist_interval = match &raw.relist_interval_secs {
        Some(value) => Duration::from_secs(to_u64(integer(value, 1..=3600)?)),
        None => DEFAULT_RELIST_INTERVAL,
    };
    let max_restarts = match &raw.max_restarts {
        // Bounded so that a typo cannot make a crashing remote loop forever.
        Some(value) => to_u64(integer(value, 0..=100)?) as u32,
        None => DEFAULT_MAX_RESTARTS,
    };
    let defaults = OutpostDefaults::resolve(&raw)?;
    let outposts = outposts(&raw, &defaults, credentials)?;
    // Only checked, and the key only required, when an outpost uses it.
    let tensorlake = outposts
        .iter()
        .any(|o| o.backend == BackendKind::Tensorlake)
        .then(|| tensorlake_settings(&raw))
        .transpose()?;
    let modal = outposts
        .iter()
        .any(|o| o.backend == BackendKind::Modal)
        .then(|| modal::resolve(host))
        .transpose()?;

    Ok(ServeConfig {
        api_url,
        token,
        acceptor_id,
        static_base_url,
        state_dir,
        snapshot_dir,
        snapshot_retention,
        relist_interval,
        // Polling exists only for benchmarks; no setting selects it.
        queue_mode: QueueMode::Watch,
        drain: raw.drain.is_some_and(|d| d.value),
        policy: Policy {
            max_restarts,
            ..Policy::default()
        },
        outposts,
        // Set by the caller from `--listen`.
        admin_listen: None,
        tensorlake,
        modal,
    })
}

/// The Tensorlake backend's settings: the API key from
/// `TENSORLAKE_API_KEY`, else from the file `TENSORLAKE_API_KEY_FILE` names
/// (refused if other users may read it).
pub fn tensorlake_settings(raw: &RawSettings) -> Result<TensorlakeSettings, SettingsError> {
    let api_key = match (&raw.tensorlake_api_key, &raw.tensorlake_api_key_file) {
        (Some(key), _) => key.clone(),
        (None, Some(path)) => Sourced::new(read_secret_file(&path.value)?, path.origin.clone()),
        (None, None) => return Err(SettingsError::NoTensorlakeKey),
    };
    if api_key.value.is_empty() {
        return Err(SettingsError::NoTensorlakeKey);
    }
    if api_key
        .value
        .expose()
        .chars()
        .any(|c| c.is_control() || c == ' ')
    {
        return Err(api_key.invalid("the API key has spaces or control characters"));
    }
    let api_url = match &raw.tensorlake_api_url {
        Some(value) => api_url(value)?,
        None => tensorlake::DEFAULT_API_URL.to_owned(),
    };
    let image = raw.tensorlake_image.as_ref().map(image).transpose()?;
    let timeout_secs = match &raw.sandbox_timeout_secs {
        // Up to 30 days; 0 would leave the choice to Tensorlake's plan.
        Some(value) => to_u64(integer(value, 0..=30 * 24 * 3600)?),
        None => DEFAULT_SANDBOX_TIMEOUT_SECS,
    };
    let sandbox_root = match &raw.tensorlake_sandbox_root {
        Some(root) => {
            let path = Path::new(&root.value);
            let clean = path.is_absolute()
                && path
                    .components()
                    .all(|c| !matches!(c, std::path::Component::ParentDir));
            if !clean || root.value.chars().any(char::is_control) {
                return Err(root.invalid(format!(
                    "expected an absolute directory inside the sandbox, such as {:?}",
                    tensorlake::backend::DEFAULT_SANDBOX_ROOT
                )));
            }
            root.value.clone()
        }
        None => tensorlake::backend::DEFAULT_SANDBOX_ROOT.to_owned(),
    };
    Ok(TensorlakeSettings {
        api_url,
        api_key: api_key.value,
        image,
        timeout_secs,
        sandbox_root,
    })
}

/// Reads a secret from a file that only its owner may read; one trailing
/// newline is dropped.
fn read_secret_file(path: &Path) -> Result<Secret, SettingsError> {
    let text = read_owner_only(path, 64 * 1024)?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    Ok(Secret::new(text))
}

/// The top-level per-outpost settings, validated, which tables fall back to.
/// They are checked even if every table overrides them: a bad value is an
/// error wherever it would have applied.
struct OutpostDefaults {
    backend: BackendKind,
    max_concurrent: usize,
    resources: Resources,
    image: Option<String>,
    repos: Repos,
}

impl OutpostDefaults {
    fn resolve(raw: &RawSettings) -> Result<Self, SettingsError> {
        let builtin = Resources::default();
        Ok(Self {
            backend: raw
                .backend
                .as_ref()
                .map(backend)
                .transpose()?
                .unwrap_or(DEFAULT_BACKEND),
            max_concurrent: raw
                .max_concurrent
                .as_ref()
                .map(max_concurrent)
                .transpose()?
                .unwrap_or(DEFAULT_MAX_CONCURRENT),
            resources: Resources {
                cpus: raw
                    .cpus
                    .as_ref()
                    .map(cpus)
                    .transpose()?
                    .unwrap_or(builtin.cpus),
                memory_mb: raw
                    .memory_mb
                    .as_ref()
                    .map(memory_mb)
                    .transpose()?
                    .unwrap_or(builtin.memory_mb),
                disk_mb: raw
                    .disk_mb
                    .as_ref()
                    .map(disk_mb)
                    .transpose()?
                    .unwrap_or(builtin.disk_mb),
            },
            image: raw.image.as_ref().map(image).transpose()?,
            repos: Repos {
                urls: raw
                    .repos
                    .as_ref()
                    .map(repo_urls)
                    .transpose()?
                    .unwrap_or_default(),
                git_username: raw.git_username.as_ref().map(git_username).transpose()?,
                git_token: raw.git_token.as_ref().map(git_token).transpose()?,
            },
        })
    }

    fn outpost(
        &self,
        outpost_id: String,
        table: Option<&OutpostTable>,
    ) -> Result<OutpostConfig, SettingsError> {
        let Some(t) = table else {
            return Ok(OutpostConfig {
                outpost_id,
                backend: self.backend,
                max_concurrent: self.max_concurrent,
                resources: self.resources,
                image: self.image.clone(),
                platform: Platform::Linux,
                repos: self.repos.clone(),
            });
        };
        Ok(OutpostConfig {
            outpost_id,
            backend: t
                .backend
                .as_ref()
                .map(backend)
                .transpose()?
                .unwrap_or(self.backend),
            max_concurrent: t
                .max_concurrent
                .as_ref()
                .map(max_concurrent)
                .transpose()?
                .unwrap_or(self.max_concurrent),
            resources: Resources {
                cpus: t
                    .cpus
                    .as_ref()
                    .map(cpus)
                    .transpose()?
                    .unwrap_or(self.resources.cpus),
                memory_mb: t
                    .memory_mb
                    .as_ref()
                    .map(memory_mb)
                    .transpose()?
                    .unwrap_or(self.resources.memory_mb),
                disk_mb: t
                    .disk_mb
                    .as_ref()
                    .map(disk_mb)
                    .transpose()?
                    .unwrap_or(self.resources.disk_mb),
            },
            image: match &t.image {
                Some(value) => Some(image(value)?),
                None => self.image.clone(),
            },
            platform: t
                .platform
                .as_ref()
                .map(platform)
                .transpose()?
                .unwrap_or(Platform::Linux),
            repos: match &t.repos {
                Some(value) => Repos {
                    urls: repo_urls(value)?,
                    ..self.repos.clone()
                },
                None => self.repos.clone(),
            },
        })
    }
}

fn outposts(
    raw: &RawSettings,
    defaults: &OutpostDefaults,
    credentials: Option<(&Path, &Credentials)>,
) -> Result<Vec<OutpostConfig>, SettingsError> {
    // Tables are checked even when --outpost picks among them, so a
    // duplicate in the file is reported whatever selects the outposts.
    let mut tables: BTreeMap<&str, &OutpostTable> = BTreeMap::new();
    for table in &raw.outpost_tables {
        outpost_id(&table.id)?;
        if tables.insert(&table.id.value, table).is_some() {
            return Err(table.id.invalid(format!(
                "outpost {:?} has two [[outpost]] tables",
                table.id.value
            )));
        }
    }

    if let Some(list) = &raw.outposts {
        let mut seen = HashSet::new();
        let mut configs = Vec::new();
        for id in list
            .value
            .iter()
            .flat_map(|item| item.split(','))
            .map(str::trim)
        {
            // Tolerate "a,b," and "a, b": only the ids matter.
            if id.is_empty() {
                continue;
            }
            outpost_id(&Sourced::new(id.to_owned(), list.origin.clone()))?;
            if !seen.insert(id) {
                return Err(list.invalid(format!("outpost {id:?} is listed twice")));
            }
            configs.push(defaults.outpost(id.to_owned(), tables.get(id).copied())?);
        }
        if configs.is_empty() {
            return Err(list.invalid("no outpost id given"));
        }
        return Ok(configs);
    }

    if !raw.outpost_tables.is_empty() {
        return raw
            .outpost_tables
            .iter()
            .map(|t| defaults.outpost(t.id.value.clone(), Some(t)))
            .collect();
    }

    if let Some((path, Some(id))) = credentials.map(|(p, c)| (p, c.outpost_id.as_ref())) {
        let id = Sourced::new(
            id.clone(),
            Origin::Credentials {
                path: path.to_owned(),
                key: "outpost_id",
            },
        );
        outpost_id(&id)?;
        return Ok(vec![defaults.outpost(id.value, None)?]);
    }

    Err(SettingsError::NoOutpost)
}

// ---------------------------------------------------------------------------
// Individual values
// ---------------------------------------------------------------------------

fn token(
    env: Option<&Sourced<Secret>>,
    credentials: Option<(&Path, &Credentials)>,
) -> Result<Secret, SettingsError> {
    let token = match (env, credentials) {
        (Some(t), _) => t.clone(),
        (None, Some((path, c))) => Sourced::new(
            c.token.clone(),
            Origin::Credentials {
                path: path.to_owned(),
                key: "token",
            },
        ),
        (None, None) => return Err(SettingsError::NoToken),
    };
    if token.value.is_empty() {
        return Err(SettingsError::NoToken);
    }
    // A token read with `$(cat file)` or pasted with a newline would break
    // the Authorization header later, with a far worse message. The value is
    // never echoed.
    if token
        .value
        .expose()
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(token.invalid("contains whitespace or control characters (value not shown)"));
    }
    Ok(token.value)
}

/// An http(s) URL with a host, no credentials, query or fragment.
fn http_url(value: &Sourced<String>) -> Result<url::Url, SettingsError> {
    let text = value.value.trim();
    let url =
        url::Url::parse(text).map_err(|e| value.invalid(format!("{text:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(value.invalid(format!("{text:?} must be an http:// or https:// URL")));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(value.invalid(format!("{text:?} has no host")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Not echoed: the password is a secret.
        return Err(value.invalid("the URL must not contain a user name or password"));
    }
    if url.query().is_some() {
        return Err(value.invalid(format!("{text:?} must not have a query (?...)")));
    }
    if url.fragment().is_some() {
        return Err(value.invalid(format!("{text:?} must not have a fragment (#...)")));
    }
    Ok(url)
}

/// The API base, without a trailing slash (paths are appended to it).
fn api_url(value: &Sourced<String>) -> Result<String, SettingsError> {
    let url = http_url(value)?;
    if url.path().trim_end_matches('/').ends_with("/opbeta") {
        return Err(value.invalid(format!(
            "{:?} ends in /opbeta: give the API base without it, e.g. {DEFAULT_API_URL}",
            value.value
        )));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// A directory URL: always ends with '/', so file names join onto it.
fn static_base_url(value: &Sourced<String>) -> Result<String, SettingsError> {
    let mut url = http_url(value)?.as_str().to_owned();
    if !url.ends_with('/') {
        url.push('/');
    }
    Ok(url)
}

/// The protocol's acceptor id: 1-128 characters of `[A-Za-z0-9._-]`.
fn acceptor_id(value: &Sourced<String>) -> Result<String, SettingsError> {
    let id = &value.value;
    if id.is_empty() || id.len() > 128 {
        return Err(value.invalid(format!("{id:?} must be 1 to 128 characters long")));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(value.invalid(format!(
            "{id:?} contains {c:?}: only letters, digits, '.', '_' and '-' are allowed"
        )));
    }
    Ok(id.clone())
}

/// Outpost ids are the fleet API's; only what can never be one is refused
/// (they go into query strings, log lines and comma-separated lists).
fn outpost_id(value: &Sourced<String>) -> Result<(), SettingsError> {
    let id = &value.value;
    if id.is_empty() {
        return Err(value.invalid("the outpost id is empty"));
    }
    if id.len() > 256 {
        return Err(value.invalid(format!("outpost id {id:?} is longer than 256 characters")));
    }
    if id
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(value.invalid(format!(
            "outpost id {id:?} contains whitespace, a control character or a comma"
        )));
    }
    Ok(())
}

fn directory(value: &Sourced<PathBuf>) -> Result<PathBuf, SettingsError> {
    if value.value.as_os_str().is_empty() {
        return Err(value.invalid("the path is empty"));
    }
    Ok(value.value.clone())
}

fn backend(value: &Sourced<String>) -> Result<BackendKind, SettingsError> {
    value
        .value
        .trim()
        .parse()
        .map_err(|reason: String| value.invalid(reason))
}

fn max_concurrent(value: &Sourced<String>) -> Result<usize, SettingsError> {
    integer(value, 1..=1000).map(|n| to_u64(n) as usize)
}

fn cpus(value: &Sourced<String>) -> Result<f64, SettingsError> {
    let text = value.value.trim();
    let cpus: f64 = text
        .parse()
        .map_err(|_| value.invalid(format!("{text:?} is not a number")))?;
    // Written so that NaN fails too.
    if !(cpus > 0.0 && cpus <= 256.0) {
        return Err(value.invalid(format!(
            "{text} is out of range: more than 0 and at most 256"
        )));
    }
    Ok(cpus)
}

fn memory_mb(value: &Sourced<String>) -> Result<u64, SettingsError> {
    integer(value, 128..=i64::MAX).map(to_u64)
}

fn disk_mb(value: &Sourced<String>) -> Result<u64, SettingsError> {
    integer(value, 256..=i64::MAX).map(to_u64)
}

fn image(value: &Sourced<String>) -> Result<String, SettingsError> {
    let image = value.value.trim();
    if image.is_empty() {
        return Err(value.invalid("the image name is empty"));
    }
    Ok(image.to_owned())
}

fn platform(value: &Sourced<String>) -> Result<Platform, SettingsError> {
    match Platform::from(value.value.trim()) {
        Platform::Unknown(other) => Err(value.invalid(format!(
            "unknown platform {other:?} (expected linux, macos or windows)"
        ))),
        known => Ok(known),
    }
}

/// Clone URLs (each item may hold several, comma-separated), checked as
/// [`crate::repos::plan`] will use them. An empty list clones nothing.
fn repo_urls(value: &Sourced<Vec<String>>) -> Result<Vec<String>, SettingsError> {
    let mut urls: Vec<String> = Vec::new();
    for url in value
        .value
        .iter()
        .flat_map(|item| item.split(','))
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        let url = crate::repos::validate_url(url).map_err(|reason| value.invalid(reason))?;
        if urls.contains(&url) {
            return Err(value.invalid(format!("{url:?} is listed twice")));
        }
        urls.push(url);
    }
    crate::repos::plan(&urls).map_err(|reason| value.invalid(reason))?;
    Ok(urls)
}

fn git_username(value: &Sourced<String>) -> Result<String, SettingsError> {
    let name = value.value.trim();
    if name.is_empty() {
        return Err(value.invalid("the user name is empty"));
    }
    // A newline would forge lines of git's credential protocol.
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(value.invalid("the user name contains whitespace or control characters"));
    }
    Ok(name.to_owned())
}

fn git_token(value: &Sourced<Secret>) -> Result<Secret, SettingsError> {
    if value
        .value
        .expose()
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(value.invalid("contains whitespace or control characters (value not shown)"));
    }
    Ok(value.value.clone())
}

/// A whole number within `range`; the error quotes the text as given.
fn integer(value: &Sourced<String>, range: RangeInclusive<i64>) -> Result<i64, SettingsError> {
    let text = value.value.trim();
    let n: i64 = match text.parse() {
        Ok(n) => n,
        Err(_) if text.parse::<i128>().is_ok() => {
            return Err(value.invalid(format!("{text} is out of range {}", describe_range(&range))));
        }
        Err(_) if text.parse::<f64>().is_ok() => {
            return Err(value.invalid(format!("{text:?} is not a whole number")));
        }
        Err(_) => return Err(value.invalid(format!("{text:?} is not a number"))),
    };
    if !range.contains(&n) {
        return Err(value.invalid(format!("{n} is out of range {}", describe_range(&range))));
    }
    Ok(n)
}

fn describe_range(range: &RangeInclusive<i64>) -> String {
    if *range.end() == i64::MAX {
        format!("(the minimum is {})", range.start())
    } else {
        format!("{}..={}", range.start(), range.end())
    }
}

/// For numbers [`integer`] has already bounded below by zero or more.
fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// `"30d"`, `"12h"`, `"90m"`, `"3600s"`, or `"unlimited"` (keep forever:
/// `None`).
fn parse_retention(text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if unit.is_empty() && !number.is_empty() {
        return Err(format!("{text:?} has no unit: {RETENTION_EXAMPLES}"));
    }
    let scale: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 24 * 3600,
        _ => return Err(format!("{text:?} is not a duration: {RETENTION_EXAMPLES}")),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: {RETENTION_EXAMPLES}"))?;
    if n == 0 {
        return Err(format!(
            "{text:?} would keep nothing: give a positive duration, or \"unlimited\" to keep snapshots forever"
        ));
    }
    n.checked_mul(scale)
        .map(|secs| Some(Duration::from_secs(secs)))
        .ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests;
