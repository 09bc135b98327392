//! The resolved configuration of `garrison serve`.
//!
//! How flags, environment and the TOML file are merged into these types is
//! in [`crate::settings`]; everything downstream sees only validated values.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fleet::{Platform, Secret};
use sandbox::plugin::ConfiguredBackend;
use sandbox::{ObjectStoreSettings, Resources};

use crate::planner::Policy;
pub use crate::repos::Repos;

/// The backend used when none is configured: a container per session on
/// this machine. `host` (no isolation) must be asked for.
pub const DEFAULT_BACKEND: &str = "local";
/// Restarts of a crashing remote before the session is given up.
pub const DEFAULT_MAX_RESTARTS: u32 = 3;
/// The default cap of a session log, in MiB.
pub const DEFAULT_SESSION_LOG_MAX_MB: u64 = crate::planner::DEFAULT_SESSION_LOG_MAX_BYTES >> 20;
/// The free space the state directory keeps in reserve, in MiB.
pub const DEFAULT_STATE_DIR_MIN_FREE_MB: u64 = crate::planner::DEFAULT_MIN_FREE_BYTES >> 20;
/// The environment variable holding the Devin token.
pub const TOKEN_ENV: &str = "DEVIN_OUTPOSTS_TOKEN";
/// The environment variable holding the snapshot encryption key (64 hex
/// digits); never a flag or a file key, like the token.
pub const SNAPSHOT_KEY_ENV: &str = "GARRISON_SNAPSHOT_KEY";
/// The environment variable naming the configuration directory.
pub const CONFIG_DIR_ENV: &str = "GARRISON_CONFIG";
/// The TOML file read from the configuration directory when `--config` is
/// not given.
pub const CONFIG_FILE_NAME: &str = "garrison.toml";
/// The file `garrison connect` writes in the configuration directory.
pub const CREDENTIALS_FILE_NAME: &str = "credentials.json";

/// Where `devin-remote` is published.
pub const DEFAULT_STATIC_BASE_URL: &str = "https://static.devin.ai/devin-rs/remote/";
/// The fleet API when none is given.
pub const DEFAULT_API_URL: &str = "https://api.devin.ai";
/// Sessions per outpost when not given.
pub const DEFAULT_MAX_CONCURRENT: usize = 5;
/// Where the admin listener binds: loopback only, unless asked.
pub const DEFAULT_LISTEN: std::net::SocketAddr = std::net::SocketAddr::V4(
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9180),
);
/// How often the queue is listed again.
pub const DEFAULT_RELIST_INTERVAL: Duration = Duration::from_secs(30);
/// How long snapshots are kept.
pub const DEFAULT_SNAPSHOT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How the queue view learns about new entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueMode {
    /// List once, then follow the watch stream, with the periodic re-list
    /// behind it: what `garrison serve` always does.
    #[default]
    Watch,
    /// List every interval and never open a watch: how polling orchestrators
    /// discover work. Only for measuring Garrison against them
    /// (`garrison bench queue`); never a production setting.
    Poll(Duration),
}

/// One outpost served by this process.
#[derive(Clone, Debug, PartialEq)]
pub struct OutpostConfig {
    /// The outpost.
    pub outpost_id: String,
    /// The backend's name, as its plug-in gives it (one of those passed
    /// to [`crate::settings::resolve`]).
    pub backend: &'static str,
    /// The most sessions held at once.
    pub max_concurrent: usize,
    /// Each sandbox's resources.
    pub resources: Resources,
    /// Backend-specific image; `None` is the backend's default.
    pub image: Option<String>,
    /// The platform whose sessions are claimed.
    pub platform: Platform,
    /// Cloned into every sandbox created fresh (see `crate::repos`).
    pub repos: Repos,
}

/// Everything `garrison serve` needs, validated.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// API base without `/opbeta`.
    pub api_url: String,
    /// The Devin token.
    pub token: Secret,
    /// Overrides the acceptor id stored in the state directory.
    pub acceptor_id: Option<String>,
    /// Where devin-remote is downloaded from.
    pub static_base_url: String,
    /// `$GARRISON_HOME`: database, sessions, cache.
    pub state_dir: PathBuf,
    /// Below this many bytes free in the state directory's file system,
    /// nothing new is claimed (`state_dir_min_free_mb`).
    pub state_dir_min_free_bytes: u64,
    /// Where snapshots are kept; may be shared by several Garrison processes.
    /// With `snapshot_store`, only archives on their way up or down.
    pub snapshot_dir: PathBuf,
    /// The object store snapshots are kept in instead, shared by every
    /// Garrison that names it.
    pub snapshot_store: Option<ObjectStoreSettings>,
    /// `None` keeps snapshots forever.
    pub snapshot_retention: Option<Duration>,
    /// How often the queue is listed again.
    pub relist_interval: Duration,
    /// Watch (always, outside benchmarks) or poll the queue.
    pub queue_mode: QueueMode,
    /// On SIGTERM, wait for running sessions to end instead of leaving them.
    pub drain: bool,
    /// The planner's knobs.
    pub policy: Policy,
    /// The gateway for a claim that carries no `gateway_url`
    /// (`gateway_url`, Devin's `--gateway-url`); without it such a claim
    /// cannot start.
    pub gateway_url: Option<String>,
    /// The outposts to serve.
    pub outposts: Vec<OutpostConfig>,
    /// Where the admin listener (metrics, health, JSON API, dashboard)
    /// binds; `None` runs without one.
    pub admin_listen: Option<std::net::SocketAddr>,
    /// The settings of each backend an outpost uses, by name, resolved at
    /// start so that a bad value stops `serve` before it claims anything.
    pub backends: BTreeMap<&'static str, Arc<dyn ConfiguredBackend>>,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The settings of the `garrison serve` process itself rather than of
/// what it serves: how it logs and where its admin listener binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessSettings {
    /// How logs are written.
    pub log_format: LogFormat,
    /// Where the admin listener listens.
    pub listen: std::net::SocketAddr,
}
