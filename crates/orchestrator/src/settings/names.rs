//! Every one of Garrison's own settings, declared once: its flag, its
//! environment variable, its key in `garrison.toml`, the values it takes,
//! its default and its help ([`Setting`]). The flags' help of `garrison
//! serve`, the environment layer, the file's list of keys, the ranges
//! validation checks and `garrison.toml.example` are all read from, or
//! tested against, [`ALL`]. Backends' settings are declared the same way
//! by their plug-ins.

pub use common::settings::{Kind, Setting};

/// The most sessions one outpost may hold at once: `bench scale` shows a
/// thousand held with room to spare; ten times that is a typo.
const MAX_CONCURRENT_LIMIT: i64 = 10_000;

/// The `outpost` setting: Outpost to serve; repeat or separate with commas for several.
pub const OUTPOST: Setting = Setting::new(
    "outpost",
    "--outpost",
    "OUTPOST_ID",
    Kind::List,
    "Outpost to serve; repeat or separate with commas for several",
)
.described_default("the file's [[outpost]] tables, else the one `garrison connect` saved")
// The file lists outposts as [[outpost]] tables, each with its overrides.
.not_in_file();
/// The `api_url` setting: Devin API base, without /opbeta.
pub const API_URL: Setting = Setting::new(
    "api_url",
    "--api-url",
    "DEVIN_API_URL",
    Kind::Text,
    "Devin API base, without /opbeta",
)
.default("\"https://api.devin.ai\"");
/// The `acceptor_id` setting: This worker's identity when claiming sessions, 1-128 of [A-Za-z0-9._-].
pub const ACCEPTOR_ID: Setting = Setting::new(
    "acceptor_id",
    "--acceptor-id",
    "DEVIN_WORKER_ACCEPTOR_ID",
    Kind::Text,
    "This worker's identity when claiming sessions, 1-128 of [A-Za-z0-9._-]",
)
.described_default("generated once and kept in the state directory")
.example("\"garrison-lab-1\"");
/// The `static_base_url` setting: Where devin-remote is downloaded from (each download is checked against its published SHA-256).
pub const STATIC_BASE_URL: Setting = Setting::new(
    "static_base_url",
    "--static-base-url",
    "DEVIN_WORKER_STATIC_BASE_URL",
    Kind::Text,
    "Where devin-remote is downloaded from (each download is checked against its published SHA-256)",
)
.default("\"https://static.devin.ai/devin-rs/remote/\"");
/// The `backend` setting: Sandbox backend.
pub const BACKEND: Setting = Setting::new(
    "backend",
    "--backend",
    "GARRISON_BACKEND",
    Kind::Backend,
    "Sandbox backend",
)
.default("\"local\"")
.per_outpost();
/// The `max_concurrent` setting: Sessions run at once, per outpost.
pub const MAX_CONCURRENT: Setting = Setting::new(
    "max_concurrent",
    "--max-concurrent",
    "MAX_CONCURRENT_SESSIONS",
    Kind::Int {
        min: 1,
        max: MAX_CONCURRENT_LIMIT,
    },
    "Sessions run at once, per outpost",
)
.default("5")
.per_outpost();
/// The `state_dir` setting: Database, session logs, caches and images.
pub const STATE_DIR: Setting = Setting::new(
    "state_dir",
    "--state-dir",
    "GARRISON_HOME",
    Kind::Path,
    "Database, session logs, caches and images",
)
.described_default("/var/lib/garrison as root, else ~/.local/share/garrison")
.example("\"/var/lib/garrison\"");
/// The `snapshot_dir` setting: Where snapshots are kept; may be shared by several Garrisons, so any of them resumes a session.
pub const SNAPSHOT_DIR: Setting = Setting::new(
    "snapshot_dir",
    "--snapshot-dir",
    "GARRISON_SNAPSHOT_DIR",
    Kind::Path,
    "Where snapshots are kept; may be shared by several Garrisons, so any of them resumes a session",
)
.described_default("<state-dir>/snapshots")
.example("\"/var/lib/garrison/snapshots\"");
/// The `snapshot_store` setting: Where snapshots are kept instead: a directory, or an object store every host reaches (s3://BUCKET/PREFIX, gs://…, az://…; credentials and endpoint from AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, … only).
pub const SNAPSHOT_STORE: Setting = Setting::new(
    "snapshot_store",
    "--snapshot-store",
    "GARRISON_SNAPSHOT_STORE",
    Kind::Text,
    "Where snapshots are kept instead: a directory, or an object store every host reaches \
     (s3://BUCKET/PREFIX, gs://…, az://…; credentials and endpoint from AWS_ACCESS_KEY_ID, \
     AWS_ENDPOINT_URL, … only)",
)
.described_default("the snapshot directory")
.example("\"s3://my-bucket/garrison\"");
/// The `snapshot_key_file` setting: A file (mode 0600) holding the key that encrypts snapshots in the object store: 64 hex digits; or set GARRISON_SNAPSHOT_KEY.
pub const SNAPSHOT_KEY_FILE: Setting = Setting::new(
    "snapshot_key_file",
    "--snapshot-key-file",
    "GARRISON_SNAPSHOT_KEY_FILE",
    Kind::Path,
    "A file (mode 0600) holding the key that encrypts snapshots in the object store: \
     64 hex digits; or set GARRISON_SNAPSHOT_KEY",
)
.example("\"/etc/garrison/snapshot.key\"");
/// The `snapshot_key` setting: The key that encrypts snapshots in the object store, 64 hex digits.
pub const SNAPSHOT_KEY: Setting = Setting::secret(
    "snapshot_key",
    "GARRISON_SNAPSHOT_KEY",
    "The key that encrypts snapshots in the object store, 64 hex digits",
);
/// The `snapshot_integrity_fallback` setting: When a snapshot fails its integrity check: fail the session and keep the snapshot, or start it fresh.
pub const SNAPSHOT_INTEGRITY_FALLBACK: Setting = Setting::new(
    "snapshot_integrity_fallback",
    "--snapshot-integrity-fallback",
    "GARRISON_SNAPSHOT_INTEGRITY_FALLBACK",
    Kind::Choice(&["fail", "fresh"]),
    "When a snapshot fails its integrity check: fail the session and keep the snapshot, \
     or start it fresh",
)
.default("\"fail\"");
/// The `snapshot_retention` setting: How long snapshots are kept: 30d, 12h, 90m, 3600s or unlimited.
pub const SNAPSHOT_RETENTION: Setting = Setting::new(
    "snapshot_retention",
    "--snapshot-retention",
    "SNAPSHOT_RETENTION",
    Kind::Duration,
    "How long snapshots are kept: 30d, 12h, 90m, 3600s or unlimited",
)
.default("\"30d\"");
/// The `relist_interval_secs` setting: Seconds between full re-lists of the queue behind the watch.
pub const RELIST_INTERVAL_SECS: Setting = Setting::new(
    "relist_interval_secs",
    "--relist-interval-secs",
    "GARRISON_RELIST_INTERVAL_SECS",
    Kind::Int { min: 1, max: 3600 },
    "Seconds between full re-lists of the queue behind the watch",
)
.default("30");
/// The `drain` setting: On SIGTERM, wait for running sessions to end instead of leaving them.
pub const DRAIN: Setting = Setting::new(
    "drain",
    "--drain",
    "GARRISON_DRAIN",
    Kind::Bool,
    "On SIGTERM, wait for running sessions to end instead of leaving them",
)
.default("false");
/// The `cpus` setting: vCPUs per session sandbox.
pub const CPUS: Setting = Setting::new(
    "cpus",
    "--cpus",
    "SANDBOX_CPUS",
    Kind::Float {
        above: 0.0,
        max: 256.0,
    },
    "vCPUs per session sandbox",
)
.default("2")
.per_outpost();
/// The `memory_mb` setting: Memory per session sandbox in MiB.
pub const MEMORY_MB: Setting = Setting::new(
    "memory_mb",
    "--memory-mb",
    "SANDBOX_MEMORY_MB",
    Kind::Int {
        min: 128,
        max: i64::MAX,
    },
    "Memory per session sandbox in MiB",
)
.default("8192")
.per_outpost();
/// The `disk_mb` setting: Disk per session sandbox in MiB.
pub const DISK_MB: Setting = Setting::new(
    "disk_mb",
    "--disk-mb",
    "SANDBOX_DISK_MB",
    Kind::Int {
        min: 256,
        max: i64::MAX,
    },
    "Disk per session sandbox in MiB",
)
.default("10240")
.per_outpost();
/// The `image` setting: Sandbox image (for the local backend, one built with `garrison image build NAME`).
pub const IMAGE: Setting = Setting::new(
    "image",
    "--image",
    "SANDBOX_IMAGE",
    Kind::Text,
    "Sandbox image (for the local backend, one built with `garrison image build NAME`)",
)
.described_default("the backend's")
.example("\"default\"")
.per_outpost();
/// The `max_restarts` setting: Restarts of a crashing remote before the session is given up.
pub const MAX_RESTARTS: Setting = Setting::new(
    "max_restarts",
    "--max-restarts",
    "GARRISON_MAX_RESTARTS",
    Kind::Int { min: 0, max: 100 },
    "Restarts of a crashing remote before the session is given up",
)
.default("3");
/// The `suspend_exit_grace_secs` setting: Seconds the remote of a suspended session may take to exit by itself before it is killed.
pub const SUSPEND_EXIT_GRACE_SECS: Setting = Setting::new(
    "suspend_exit_grace_secs",
    "--suspend-exit-grace-secs",
    "GARRISON_SUSPEND_EXIT_GRACE_SECS",
    Kind::Int {
        min: 10,
        max: 86_400,
    },
    "Seconds the remote of a suspended session may take to exit by itself before it is killed",
)
.default("120");
/// The `gateway_url` setting: Gateway (ws:// or wss://) for a claim that carries none (Devin's `--gateway-url`).
pub const GATEWAY_URL: Setting = Setting::new(
    "gateway_url",
    "--gateway-url",
    "DEVIN_OUTPOST_GATEWAY_URL",
    Kind::Text,
    "Gateway (ws:// or wss://) for a claim that carries none (Devin's `--gateway-url`)",
)
.described_default("none: such a claim cannot start")
.example("\"wss://outpost-gateway.devin.ai\"");
/// The `session_log_max_mb` setting: Output of a session's remote copied into its log, in MiB; past it the log says so and stops growing.
pub const SESSION_LOG_MAX_MB: Setting = Setting::new(
    "session_log_max_mb",
    "--session-log-max-mb",
    "SESSION_LOG_MAX_MB",
    Kind::Int {
        min: 1,
        max: 1 << 20,
    },
    "Output of a session's remote copied into its log, in MiB; past it the log says so \
     and stops growing",
)
.default("256");
/// The `state_dir_min_free_mb` setting: Free space, in MiB, the state directory's file system keeps in reserve; below it no new session is claimed (held ones keep running) until space is freed.
pub const STATE_DIR_MIN_FREE_MB: Setting = Setting::new(
    "state_dir_min_free_mb",
    "--state-dir-min-free-mb",
    "GARRISON_STATE_DIR_MIN_FREE_MB",
    Kind::Int {
        min: 0,
        max: 1 << 20,
    },
    "Free space, in MiB, the state directory's file system keeps in reserve; below it no \
     new session is claimed (held ones keep running) until space is freed",
)
.default("64");
/// The `config` setting: TOML settings file.
pub const CONFIG: Setting = Setting::new(
    "config",
    "--config",
    "GARRISON_CONFIG_FILE",
    Kind::Path,
    "TOML settings file",
)
.described_default("$GARRISON_CONFIG/garrison.toml, if it exists")
// It names the file.
.not_in_file();
/// The `repos` setting: Repositories cloned into each new sandbox's workspace before the remote starts (https://, http://, ssh://, file:// or user@host:path, never with credentials in the URL); repeat or separate with commas.
pub const REPOS: Setting = Setting::new(
    "repos",
    "--repos",
    "REPOS",
    Kind::List,
    "Repositories cloned into each new sandbox's workspace before the remote starts \
     (https://, http://, ssh://, file:// or user@host:path, never with credentials in the \
     URL); repeat or separate with commas",
)
.example("[\"https://github.com/acme/api.git\"]")
.per_outpost();
/// The `git_username` setting: User name for cloning private repositories with GIT_TOKEN.
pub const GIT_USERNAME: Setting = Setting::new(
    "git_username",
    "--git-username",
    "GIT_USERNAME",
    Kind::Text,
    "User name for cloning private repositories with GIT_TOKEN",
)
.described_default("x-access-token")
.example("\"x-access-token\"");
/// The `git_token` setting: Token for cloning private repositories, given to the clone command only.
pub const GIT_TOKEN: Setting = Setting::secret(
    "git_token",
    crate::repos::GIT_TOKEN_ENV,
    "Token for cloning private repositories, given to the clone command only",
);
/// The `token` setting: The Devin token (else the credentials file `garrison connect` writes).
pub const TOKEN: Setting = Setting::secret(
    "token",
    super::resolved::TOKEN_ENV,
    "The Devin token (else the credentials file `garrison connect` writes)",
);
/// The `log_format` setting: Log line format.
pub const LOG_FORMAT: Setting = Setting::new(
    "log_format",
    "--log-format",
    "GARRISON_LOG_FORMAT",
    Kind::Choice(&["text", "json"]),
    "Log line format",
)
.default("\"text\"");
/// The `listen` setting: Address of the admin listener (health, metrics, JSON API, dashboard).
pub const LISTEN: Setting = Setting::new(
    "listen",
    "--listen",
    "GARRISON_LISTEN",
    Kind::Text,
    "Address of the admin listener (health, metrics, JSON API, dashboard)",
)
.default("\"127.0.0.1:9180\"");

/// Every setting of `garrison serve`, in the order `--help` and
/// `garrison.toml.example` list them.
pub const ALL: &[Setting] = &[
    OUTPOST,
    API_URL,
    ACCEPTOR_ID,
    STATIC_BASE_URL,
    BACKEND,
    MAX_CONCURRENT,
    CPUS,
    MEMORY_MB,
    DISK_MB,
    IMAGE,
    STATE_DIR,
    SNAPSHOT_DIR,
    SNAPSHOT_STORE,
    SNAPSHOT_KEY_FILE,
    SNAPSHOT_KEY,
    SNAPSHOT_INTEGRITY_FALLBACK,
    SNAPSHOT_RETENTION,
    RELIST_INTERVAL_SECS,
    DRAIN,
    MAX_RESTARTS,
    SUSPEND_EXIT_GRACE_SECS,
    GATEWAY_URL,
    SESSION_LOG_MAX_MB,
    STATE_DIR_MIN_FREE_MB,
    REPOS,
    GIT_USERNAME,
    GIT_TOKEN,
    TOKEN,
    LOG_FORMAT,
    LISTEN,
    CONFIG,
];

/// Keys of an `[[outpost]]` table that are not settings of their own: the
/// outpost's id, and the platform whose sessions it claims.
pub const OUTPOST_ONLY_KEYS: &[&str] = &["id", "platform"];

/// The top-level keys of `garrison.toml` that are Garrison's own (the
/// `[[outpost]]` tables aside).
pub fn file_keys() -> impl Iterator<Item = &'static str> {
    ALL.iter().filter(|s| s.in_file).map(|s| s.name)
}

/// The keys of an `[[outpost]]` table.
pub fn outpost_keys() -> impl Iterator<Item = &'static str> {
    OUTPOST_ONLY_KEYS.iter().copied().chain(
        ALL.iter()
            .filter(|s| s.per_outpost && s.in_file)
            .map(|s| s.name),
    )
}
