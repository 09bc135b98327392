//! Every one of Garrison's own settings, spelled once: its flag, its
//! environment variable and its key in `garrison.toml` (the `garrison
//! serve` flags are checked against this list by a test). Backends' settings
//! are named by their plug-ins.

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
pub const SNAPSHOT_STORE: Names = n(
    "--snapshot-store",
    Some("GARRISON_SNAPSHOT_STORE"),
    "snapshot_store",
);
pub const SNAPSHOT_KEY_FILE: Names = n(
    "--snapshot-key-file",
    Some("GARRISON_SNAPSHOT_KEY_FILE"),
    "snapshot_key_file",
);
pub const SNAPSHOT_INTEGRITY_FALLBACK: Names = n(
    "--snapshot-integrity-fallback",
    Some("GARRISON_SNAPSHOT_INTEGRITY_FALLBACK"),
    "snapshot_integrity_fallback",
);
pub const SNAPSHOT_RETENTION: Names = n(
    "--snapshot-retention",
    Some("SNAPSHOT_RETENTION"),
    "snapshot_retention",
);
pub const RELIST_INTERVAL_SECS: Names = n("--relist-interval-secs", None, "relist_interval_secs");
pub const DRAIN: Names = n("--drain", None, "drain");
pub const CPUS: Names = n("--cpus", Some("SANDBOX_CPUS"), "cpus");
pub const MEMORY_MB: Names = n("--memory-mb", Some("SANDBOX_MEMORY_MB"), "memory_mb");
pub const DISK_MB: Names = n("--disk-mb", Some("SANDBOX_DISK_MB"), "disk_mb");
pub const IMAGE: Names = n("--image", Some("SANDBOX_IMAGE"), "image");
pub const MAX_RESTARTS: Names = n("--max-restarts", None, "max_restarts");
pub const SUSPEND_EXIT_GRACE_SECS: Names =
    n("--suspend-exit-grace-secs", None, "suspend_exit_grace_secs");
/// The spelling of `devin worker --gateway-url` in Devin's docs.
pub const GATEWAY_URL: Names = n(
    "--gateway-url",
    Some("DEVIN_OUTPOST_GATEWAY_URL"),
    "gateway_url",
);
pub const SESSION_LOG_MAX_MB: Names = n(
    "--session-log-max-mb",
    Some("SESSION_LOG_MAX_MB"),
    "session_log_max_mb",
);
pub const CONFIG: Names = n("--config", Some("GARRISON_CONFIG_FILE"), "config");
pub const REPOS: Names = n("--repos", Some("REPOS"), "repos");
pub const GIT_USERNAME: Names = n("--git-username", Some("GIT_USERNAME"), "git_username");

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
    SNAPSHOT_STORE,
    SNAPSHOT_KEY_FILE,
    SNAPSHOT_INTEGRITY_FALLBACK,
    SNAPSHOT_RETENTION,
    RELIST_INTERVAL_SECS,
    DRAIN,
    CPUS,
    MEMORY_MB,
    DISK_MB,
    IMAGE,
    MAX_RESTARTS,
    SUSPEND_EXIT_GRACE_SECS,
    GATEWAY_URL,
    SESSION_LOG_MAX_MB,
    CONFIG,
    REPOS,
    GIT_USERNAME,
];
