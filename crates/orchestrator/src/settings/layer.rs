//! One layer of settings (flags, environment or file), and how layers
//! merge.

use std::collections::BTreeMap;
use std::path::PathBuf;

use fleet::Secret;

use super::names::{self, Setting};
use common::settings::{Origin, Sourced};

use super::host::HostEnv;

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
    /// `api_url`, if this layer gives it.
    pub api_url: Option<Sourced<String>>,
    /// `acceptor_id`, if this layer gives it.
    pub acceptor_id: Option<Sourced<String>>,
    /// `static_base_url`, if this layer gives it.
    pub static_base_url: Option<Sourced<String>>,
    /// `backend`, if this layer gives it.
    pub backend: Option<Sourced<String>>,
    /// `max_concurrent`, if this layer gives it.
    pub max_concurrent: Option<Sourced<String>>,
    /// `state_dir`, if this layer gives it.
    pub state_dir: Option<Sourced<PathBuf>>,
    /// `snapshot_dir`, if this layer gives it.
    pub snapshot_dir: Option<Sourced<PathBuf>>,
    /// A directory, or an object-store URL.
    pub snapshot_store: Option<Sourced<String>>,
    /// `snapshot_key_file`, if this layer gives it.
    pub snapshot_key_file: Option<Sourced<PathBuf>>,
    /// `GARRISON_SNAPSHOT_KEY`: only from the environment, like `token`.
    pub snapshot_key: Option<Sourced<Secret>>,
    /// `snapshot_integrity_fallback`, if this layer gives it.
    pub snapshot_integrity_fallback: Option<Sourced<String>>,
    /// `snapshot_retention`, if this layer gives it.
    pub snapshot_retention: Option<Sourced<String>>,
    /// `relist_interval_secs`, if this layer gives it.
    pub relist_interval_secs: Option<Sourced<String>>,
    /// `true` or `false` (a flag given is `true`).
    pub drain: Option<Sourced<String>>,
    /// `cpus`, if this layer gives it.
    pub cpus: Option<Sourced<String>>,
    /// `memory_mb`, if this layer gives it.
    pub memory_mb: Option<Sourced<String>>,
    /// `disk_mb`, if this layer gives it.
    pub disk_mb: Option<Sourced<String>>,
    /// `image`, if this layer gives it.
    pub image: Option<Sourced<String>>,
    /// `max_restarts`, if this layer gives it.
    pub max_restarts: Option<Sourced<String>>,
    /// `suspend_exit_grace_secs`, if this layer gives it.
    pub suspend_exit_grace_secs: Option<Sourced<String>>,
    /// `gateway_url`, if this layer gives it.
    pub gateway_url: Option<Sourced<String>>,
    /// `session_log_max_mb`, if this layer gives it.
    pub session_log_max_mb: Option<Sourced<String>>,
    /// `state_dir_min_free_mb`, if this layer gives it.
    pub state_dir_min_free_mb: Option<Sourced<String>>,
    /// Only from the environment; `Secret` keeps it out of `Debug`.
    pub token: Option<Sourced<Secret>>,
    /// Clone URLs; each item may hold several, comma-separated.
    pub repos: Option<Sourced<Vec<String>>>,
    /// `git_username`, if this layer gives it.
    pub git_username: Option<Sourced<String>>,
    /// `GIT_TOKEN`: only from the environment, like `token`.
    pub git_token: Option<Sourced<Secret>>,
    /// `log_format`, if this layer gives it.
    pub log_format: Option<Sourced<String>>,
    /// The admin listener's address, as text until resolved.
    pub listen: Option<Sourced<String>>,
    /// Top-level keys of the file that belong to a backend (its plug-in
    /// declared them), numbers as text; the backend reads and checks them.
    pub backend_keys: BTreeMap<&'static str, Sourced<String>>,
    /// The file's `[[outpost]]` tables, in file order.
    pub outpost_tables: Vec<OutpostTable>,
    /// Flags of backends' settings, by the setting's file key (only the
    /// flag layer sets them); the backend reads and checks them.
    pub backend_flags: BTreeMap<&'static str, Sourced<String>>,
}

/// One `[[outpost]]` table: per-outpost overrides of the top-level settings.
#[derive(Clone, Debug, PartialEq)]
pub struct OutpostTable {
    /// The outpost's id.
    pub id: Sourced<String>,
    /// This outpost's `backend`, if given.
    pub backend: Option<Sourced<String>>,
    /// This outpost's `max_concurrent`, if given.
    pub max_concurrent: Option<Sourced<String>>,
    /// This outpost's `cpus`, if given.
    pub cpus: Option<Sourced<String>>,
    /// This outpost's `memory_mb`, if given.
    pub memory_mb: Option<Sourced<String>>,
    /// This outpost's `disk_mb`, if given.
    pub disk_mb: Option<Sourced<String>>,
    /// This outpost's `image`, if given.
    pub image: Option<Sourced<String>>,
    /// This outpost's `platform`, if given.
    pub platform: Option<Sourced<String>>,
    /// This outpost's `repos`, if given.
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
            snapshot_store: self.snapshot_store.or(lower.snapshot_store),
            snapshot_key_file: self.snapshot_key_file.or(lower.snapshot_key_file),
            snapshot_key: self.snapshot_key.or(lower.snapshot_key),
            snapshot_integrity_fallback: self
                .snapshot_integrity_fallback
                .or(lower.snapshot_integrity_fallback),
            snapshot_retention: self.snapshot_retention.or(lower.snapshot_retention),
            relist_interval_secs: self.relist_interval_secs.or(lower.relist_interval_secs),
            drain: self.drain.or(lower.drain),
            cpus: self.cpus.or(lower.cpus),
            memory_mb: self.memory_mb.or(lower.memory_mb),
            disk_mb: self.disk_mb.or(lower.disk_mb),
            image: self.image.or(lower.image),
            max_restarts: self.max_restarts.or(lower.max_restarts),
            suspend_exit_grace_secs: self
                .suspend_exit_grace_secs
                .or(lower.suspend_exit_grace_secs),
            gateway_url: self.gateway_url.or(lower.gateway_url),
            session_log_max_mb: self.session_log_max_mb.or(lower.session_log_max_mb),
            state_dir_min_free_mb: self.state_dir_min_free_mb.or(lower.state_dir_min_free_mb),
            token: self.token.or(lower.token),
            repos: self.repos.or(lower.repos),
            git_username: self.git_username.or(lower.git_username),
            log_format: self.log_format.or(lower.log_format),
            listen: self.listen.or(lower.listen),
            backend_keys: {
                let mut keys = lower.backend_keys;
                keys.extend(self.backend_keys);
                keys
            },
            git_token: self.git_token.or(lower.git_token),
            backend_flags: {
                let mut flags = lower.backend_flags;
                flags.extend(self.backend_flags);
                flags
            },
            outpost_tables: if self.outpost_tables.is_empty() {
                lower.outpost_tables
            } else {
                self.outpost_tables
            },
        }
    }

    /// The environment layer. Empty variables count as unset.
    pub fn from_env(host: &HostEnv) -> RawSettings {
        let text = |setting: Setting| {
            let var = setting.env?;
            Some(Sourced::new(host.var(var)?.to_owned(), Origin::Env(var)))
        };
        let path = |setting: Setting| {
            text(setting).map(|s| Sourced::new(PathBuf::from(s.value), s.origin))
        };
        let secret =
            |setting: Setting| text(setting).map(|s| Sourced::new(Secret::new(s.value), s.origin));
        RawSettings {
            outposts: text(names::OUTPOST).map(|s| Sourced::new(vec![s.value], s.origin)),
            api_url: text(names::API_URL),
            acceptor_id: text(names::ACCEPTOR_ID),
            static_base_url: text(names::STATIC_BASE_URL),
            backend: text(names::BACKEND),
            max_concurrent: text(names::MAX_CONCURRENT),
            state_dir: path(names::STATE_DIR),
            snapshot_dir: path(names::SNAPSHOT_DIR),
            snapshot_store: text(names::SNAPSHOT_STORE),
            snapshot_key_file: path(names::SNAPSHOT_KEY_FILE),
            snapshot_key: secret(names::SNAPSHOT_KEY),
            snapshot_integrity_fallback: text(names::SNAPSHOT_INTEGRITY_FALLBACK),
            snapshot_retention: text(names::SNAPSHOT_RETENTION),
            relist_interval_secs: text(names::RELIST_INTERVAL_SECS),
            drain: text(names::DRAIN),
            cpus: text(names::CPUS),
            memory_mb: text(names::MEMORY_MB),
            disk_mb: text(names::DISK_MB),
            image: text(names::IMAGE),
            max_restarts: text(names::MAX_RESTARTS),
            suspend_exit_grace_secs: text(names::SUSPEND_EXIT_GRACE_SECS),
            gateway_url: text(names::GATEWAY_URL),
            session_log_max_mb: text(names::SESSION_LOG_MAX_MB),
            state_dir_min_free_mb: text(names::STATE_DIR_MIN_FREE_MB),
            token: secret(names::TOKEN),
            repos: text(names::REPOS).map(|s| Sourced::new(vec![s.value], s.origin)),
            git_username: text(names::GIT_USERNAME),
            git_token: secret(names::GIT_TOKEN),
            log_format: text(names::LOG_FORMAT),
            listen: text(names::LISTEN),
            backend_keys: BTreeMap::new(),
            outpost_tables: Vec::new(),
            backend_flags: BTreeMap::new(),
        }
    }
}
