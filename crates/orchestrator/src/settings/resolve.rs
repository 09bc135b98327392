//! From merged layers to a validated [`ServeConfig`], including the
//! settings of each backend an outpost uses (read by its plug-in).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::settings::SettingsSource;
use fleet::Platform;
use sandbox::plugin::ConfiguredBackend;
use sandbox::{ObjectStoreSettings, Resources};

use super::names;
use super::validate::*;
use common::settings::{Origin, SettingsError, Sourced};

use super::credentials::Credentials;
use super::host::HostEnv;
use super::layer::{OutpostTable, RawSettings};
use super::resolved::{
    DEFAULT_API_URL, DEFAULT_BACKEND, DEFAULT_LISTEN, DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_RESTARTS,
    DEFAULT_RELIST_INTERVAL, DEFAULT_SESSION_LOG_MAX_MB, DEFAULT_SNAPSHOT_RETENTION,
    DEFAULT_STATE_DIR_MIN_FREE_MB, DEFAULT_STATIC_BASE_URL, LogFormat, OutpostConfig,
    ProcessSettings, QueueMode, Repos, ServeConfig,
};
use crate::planner::Policy;

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
///
/// `backends` are the backends an outpost may name; each one an outpost
/// uses reads its own settings from `host`'s environment and the file's
/// keys it declared, and only those are required.
pub fn resolve(
    raw: RawSettings,
    credentials: Option<(&Path, &Credentials)>,
    host: &HostEnv,
    backends: &Backends,
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
    let store = raw
        .snapshot_store
        .as_ref()
        .map(snapshot_store)
        .transpose()?;
    let snapshot_dir = match (&raw.snapshot_dir, &store, &raw.snapshot_store) {
        (Some(dir), Some(SnapshotStoreChoice::Dir(_)), Some(value)) => {
            return Err(value.invalid(format!(
                "names a directory, and so does {}: give only one",
                dir.origin
            )));
        }
        (_, Some(SnapshotStoreChoice::Dir(dir)), _) => dir.clone(),
        (Some(value), _, _) => directory(value)?,
        (None, _, _) => state_dir.join("snapshots"),
    };
    let snapshot_key = snapshot_key(raw.snapshot_key.as_ref(), raw.snapshot_key_file.as_ref())?;
    let snapshot_store = match (store, snapshot_key) {
        (Some(SnapshotStoreChoice::Object(url)), key) => Some(ObjectStoreSettings {
            key: key.map(|(key, _)| key),
            ..ObjectStoreSettings::new(url)
        }),
        (_, Some((_, origin))) => {
            return Err(SettingsError::Invalid {
                origin,
                reason: "encrypts snapshots in an object store, and snapshot_store names none \
                         (e.g. --snapshot-store s3://BUCKET/PREFIX)"
                    .into(),
            });
        }
        (_, None) => None,
    };
    let corrupt_snapshot_starts_fresh = raw
        .snapshot_integrity_fallback
        .as_ref()
        .map(integrity_fallback)
        .transpose()?
        .unwrap_or(false);
    let snapshot_retention = match &raw.snapshot_retention {
        Some(value) => parse_retention(&value.value).map_err(|reason| value.invalid(reason))?,
        None => Some(DEFAULT_SNAPSHOT_RETENTION),
    };
    let relist_interval = match &raw.relist_interval_secs {
        Some(value) => Duration::from_secs(ranged(value, names::RELIST_INTERVAL_SECS)?),
        None => DEFAULT_RELIST_INTERVAL,
    };
    let max_restarts = match &raw.max_restarts {
        // Bounded so that a typo cannot make a crashing remote loop forever.
        Some(value) => ranged(value, names::MAX_RESTARTS)? as u32,
        None => DEFAULT_MAX_RESTARTS,
    };
    // At least 10 s: a `suspended` is read briefly on live sessions.
    let suspend_exit_grace_ms = match &raw.suspend_exit_grace_secs {
        Some(value) => ranged(value, names::SUSPEND_EXIT_GRACE_SECS)? as i64 * 1000,
        None => crate::planner::DEFAULT_SUSPEND_EXIT_GRACE_MS,
    };
    let gateway_url = raw
        .gateway_url
        .as_ref()
        .map(|value| gateway_url(&value.value).map_err(|reason| value.invalid(reason)))
        .transpose()?;
    let session_log_max_bytes = match &raw.session_log_max_mb {
        Some(value) => ranged(value, names::SESSION_LOG_MAX_MB)? << 20,
        None => DEFAULT_SESSION_LOG_MAX_MB << 20,
    };
    let state_dir_min_free_bytes = match &raw.state_dir_min_free_mb {
        Some(value) => ranged(value, names::STATE_DIR_MIN_FREE_MB)? << 20,
        None => DEFAULT_STATE_DIR_MIN_FREE_MB << 20,
    };
    // Read by the caller before anything else (the log is set up first);
    // checked here too, so that a bad value fails `doctor` as well.
    resolve_process(&raw)?;
    let defaults = OutpostDefaults::resolve(&raw, backends)?;
    let outposts = outposts(&raw, &defaults, credentials)?;
    let source = BackendSource::new(host, &raw.backend_keys).with_flags(&raw.backend_flags);
    let backends = configure_backends(&outposts, backends, &source)?;

    Ok(ServeConfig {
        api_url,
        token,
        acceptor_id,
        static_base_url,
        state_dir,
        state_dir_min_free_bytes,
        snapshot_dir,
        snapshot_store,
        snapshot_retention,
        relist_interval,
        // Polling exists only for benchmarks; no setting selects it.
        queue_mode: QueueMode::Watch,
        drain: raw
            .drain
            .as_ref()
            .map(boolean)
            .transpose()?
            .unwrap_or(false),
        policy: Policy {
            max_restarts,
            session_log_max_bytes,
            corrupt_snapshot_starts_fresh,
            suspend_exit_grace_ms,
            ..Policy::default()
        },
        gateway_url,
        outposts,
        // Set by the caller from `--listen`.
        admin_listen: None,
        backends,
    })
}

/// The log format and the admin listener's address, from the merged
/// layers or [`names::ALL`]'s defaults.
pub fn resolve_process(raw: &RawSettings) -> Result<ProcessSettings, SettingsError> {
    let log_format = match raw
        .log_format
        .as_ref()
        .map(|v| choice(v, names::LOG_FORMAT))
    {
        Some(Err(e)) => return Err(e),
        Some(Ok("json")) => LogFormat::Json,
        _ => LogFormat::Text,
    };
    let listen = match &raw.listen {
        Some(value) => socket_addr(value)?,
        None => DEFAULT_LISTEN,
    };
    Ok(ProcessSettings { log_format, listen })
}

/// Each backend an outpost uses, configured once: only a backend in use is
/// checked, and only its settings are required.
fn configure_backends(
    outposts: &[OutpostConfig],
    backends: &Backends,
    source: &BackendSource<'_>,
) -> Result<BTreeMap<&'static str, Arc<dyn ConfiguredBackend>>, SettingsError> {
    let mut configured = BTreeMap::new();
    for outpost in outposts {
        if configured.contains_key(outpost.backend) {
            continue;
        }
        let Some(plugin) = find(backends, outpost.backend) else {
            // Only the built-in default can get here unchecked.
            return Err(SettingsError::Missing(format!(
                "this build of Garrison has no {:?} backend; choose one with --backend",
                outpost.backend
            )));
        };
        configured.insert(plugin.name(), plugin.configure(source)?);
    }
    // A setting only its own backend can honour, given while no outpost
    // uses that backend: refused, rather than silently ignored.
    for plugin in backends
        .iter()
        .filter(|b| !configured.contains_key(b.name()))
    {
        for setting in plugin.settings().iter().filter(|s| s.backend_only) {
            let given = match setting.env {
                Some(env) => source.get(env, setting.name),
                None => source
                    .flag(setting.name)
                    .or_else(|| source.file_key(setting.name)),
            };
            if let Some(value) = given {
                let used: Vec<&str> = configured.keys().copied().collect();
                return Err(value.invalid(format!(
                    "{} is a setting of the {} backend, and no outpost uses it (backend {})",
                    setting.name,
                    plugin.name(),
                    used.join(", ")
                )));
            }
        }
    }
    Ok(configured)
}

/// What a backend reads its settings from: the flags of its settings
/// ([`RawSettings::backend_flags`]), the environment gathered once in
/// [`HostEnv`], and the file keys it declared (from
/// [`RawSettings::backend_keys`]).
pub struct BackendSource<'a> {
    host: &'a HostEnv,
    file: &'a BTreeMap<&'static str, Sourced<String>>,
    flags: Option<&'a BTreeMap<&'static str, Sourced<String>>>,
}

impl<'a> BackendSource<'a> {
    /// Reads from `host` and the file keys `file`.
    pub fn new(host: &'a HostEnv, file: &'a BTreeMap<&'static str, Sourced<String>>) -> Self {
        Self {
            host,
            file,
            flags: None,
        }
    }

    /// The same, with these flags above the environment.
    #[must_use]
    pub fn with_flags(mut self, flags: &'a BTreeMap<&'static str, Sourced<String>>) -> Self {
        self.flags = Some(flags);
        self
    }
}

impl SettingsSource for BackendSource<'_> {
    fn var(&self, name: &'static str) -> Option<Sourced<String>> {
        self.host
            .var(name)
            .map(|v| Sourced::new(v.to_owned(), Origin::Env(name)))
    }

    fn file_key(&self, key: &'static str) -> Option<Sourced<String>> {
        self.file.get(key).cloned()
    }

    fn flag(&self, key: &'static str) -> Option<Sourced<String>> {
        self.flags?.get(key).cloned()
    }

    fn home(&self) -> Option<PathBuf> {
        self.host.home()
    }
}

/// The top-level per-outpost settings, validated, which tables fall back to.
/// They are checked even if every table overrides them: a bad value is an
/// error wherever it would have applied.
struct OutpostDefaults<'b> {
    /// The backends an outpost may name.
    known: &'b Backends,
    backend: &'static str,
    max_concurrent: usize,
    resources: Resources,
    image: Option<String>,
    repos: Repos,
}

impl<'b> OutpostDefaults<'b> {
    fn resolve(raw: &RawSettings, known: &'b Backends) -> Result<Self, SettingsError> {
        let builtin = Resources::default();
        Ok(Self {
            known,
            backend: raw
                .backend
                .as_ref()
                .map(|value| backend(value, known))
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
                .map(|value| backend(value, self.known))
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
