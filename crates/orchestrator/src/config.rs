//! The resolved configuration of `garrison serve`.
//!
//! How flags, environment and the TOML file are merged into these types is
//! in [`crate::settings`]; everything downstream sees only validated values.

use std::path::PathBuf;
use std::time::Duration;

use fleet::{Platform, Secret};
use sandbox::Resources;

use crate::planner::Policy;

/// Where `devin-remote` is published.
pub const DEFAULT_STATIC_BASE_URL: &str = "https://static.devin.ai/devin-rs/remote/";
pub const DEFAULT_API_URL: &str = "https://api.devin.ai";
pub const DEFAULT_MAX_CONCURRENT: usize = 5;
pub const DEFAULT_RELIST_INTERVAL: Duration = Duration::from_secs(30);
pub const DEFAULT_SNAPSHOT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Which sandbox backend serves an outpost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Host,
    Local,
    Tensorlake,
    Modal,
}

impl BackendKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Local => "local",
            Self::Tensorlake => "tensorlake",
            Self::Modal => "modal",
        }
    }
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "host" => Ok(Self::Host),
            "local" => Ok(Self::Local),
            "tensorlake" => Ok(Self::Tensorlake),
            "modal" => Ok(Self::Modal),
            other => Err(format!(
                "unknown backend {other:?} (expected host, local, tensorlake or modal)"
            )),
        }
    }
}

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
    pub outpost_id: String,
    pub backend: BackendKind,
    pub max_concurrent: usize,
    pub resources: Resources,
    /// Backend-specific image; `None` is the backend's default.
    pub image: Option<String>,
    /// The platform whose sessions are claimed.
    pub platform: Platform,
    /// Cloned into every sandbox created fresh (see [`crate::repos`]).
    pub repos: Repos,
}

/// Repositories to clone into a fresh sandbox, and the credentials given to
/// the clone command only. `Debug` never shows the token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Repos {
    /// Validated clone URLs, without credentials.
    pub urls: Vec<String>,
    pub git_username: Option<String>,
    pub git_token: Option<Secret>,
}

/// Everything `garrison serve` needs, validated.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// API base without `/opbeta`.
    pub api_url: String,
    pub token: Secret,
    /// Overrides the acceptor id stored in the state directory.
    pub acceptor_id: Option<String>,
    pub static_base_url: String,
    /// `$GARRISON_HOME`: database, sessions, cache.
    pub state_dir: PathBuf,
    /// Where snapshots are kept; may be shared by several Garrison processes.
    pub snapshot_dir: PathBuf,
    /// `None` keeps snapshots forever.
    pub snapshot_retention: Option<Duration>,
    pub relist_interval: Duration,
    /// Watch (always, outside benchmarks) or poll the queue.
    pub queue_mode: QueueMode,
    /// On SIGTERM, wait for running sessions to end instead of leaving them.
    pub drain: bool,
    pub policy: Policy,
    pub outposts: Vec<OutpostConfig>,
    /// Where the admin listener (metrics, health, JSON API, dashboard)
    /// binds; `None` runs without one.
    pub admin_listen: Option<std::net::SocketAddr>,
    /// Set when an outpost uses the Tensorlake backend.
    pub tensorlake: Option<TensorlakeSettings>,
    /// Set when an outpost uses the Modal backend.
    pub modal: Option<crate::settings::modal::ModalEnv>,
}

/// Idle seconds before Tensorlake suspends a session's sandbox (the seed's
/// `SANDBOX_TIMEOUT_SECS` default).
pub const DEFAULT_SANDBOX_TIMEOUT_SECS: u64 = 1800;

/// How to reach Tensorlake and what its sandboxes get. `Debug` never shows
/// the key.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorlakeSettings {
    pub api_url: String,
    pub api_key: Secret,
    /// The image when the outpost names none.
    pub image: Option<String>,
    pub timeout_secs: u64,
    /// Garrison's directory inside each sandbox (`{id}`: the sandbox id).
    pub sandbox_root: String,
}
