//! The settings of the Modal backend (`--backend modal`), and its plug-in.
//!
//! They are declared in [`SETTINGS`] (see `table.rs`): each but the token
//! is a flag of `garrison serve`, the variable Modal's own client reads,
//! and a top-level key of `garrison.toml`; a flag beats its variable,
//! which beats the file:
//!
//! | variable | flag and file key | meaning | default |
//! | --- | --- | --- | --- |
//! | `MODAL_TOKEN_ID`, `MODAL_TOKEN_SECRET` | (never) | the Modal token | Modal's own `~/.modal.toml` (0600) |
//! | `MODAL_PROFILE` | `--modal-profile`, `modal_profile` | the profile of `~/.modal.toml` to use | the `active` one, or the only one |
//! | `MODAL_CONFIG_PATH` | `--modal-config-path`, `modal_config_path` | another place for Modal's TOML file | `~/.modal.toml` |
//! | `MODAL_SERVER_URL` (or its older alias `MODAL_API_URL`) | `--modal-server-url`, `modal_server_url` | Modal's API, as Modal's own client reads it | the profile's `server_url`, else `https://api.modal.com` |
//! | `MODAL_ENVIRONMENT` | `--modal-environment`, `modal_environment` | the Modal environment | the profile's `environment`, else the account's default |
//! | `MODAL_IMAGE` | `--modal-image`, `modal_image` | image id (`im-...`) or a name built with `garrison image build --backend modal` | the outpost's image, else `default` |
//! | `MODAL_REGION` | `--modal-region`, `modal_region` | comma-separated regions sandboxes may run in | Modal's choice |
//! | `MODAL_SANDBOX_TIMEOUT_SECS` | `--modal-sandbox-timeout-secs`, `modal_sandbox_timeout_secs` | a sandbox's maximum lifetime, 1 to 86400 | 86400 |
//! | `MODAL_SANDBOX_IDLE_TIMEOUT_SECS` | `--modal-sandbox-idle-timeout-secs`, `modal_sandbox_idle_timeout_secs` | Modal ends a sandbox idle this long, 1 to 86400 | none |
//! | `MODAL_SANDBOX_RUNTIME` | `--modal-sandbox-runtime`, `modal_sandbox_runtime` | `gvisor` or `vm` | Modal's default (gVisor) |
//!
//! The token is never taken from a flag (argv is visible to every user of
//! the machine) nor from `garrison.toml`, and never printed: it is kept in
//! [`common::Secret`]s.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod profile;
mod table;

pub(crate) use table::*;

use common::Secret;
use common::settings::{Origin, SettingsError, SettingsSource, unsigned};
use sandbox::Sandbox;
use sandbox::plugin::deploy::Deployment;
use sandbox::plugin::{ConfiguredBackend, Placement};

/// The token's id.
pub(crate) const TOKEN_ID_ENV: &str = "MODAL_TOKEN_ID";
/// The token's secret.
pub(crate) const TOKEN_SECRET_ENV: &str = "MODAL_TOKEN_SECRET";
/// The profile of `~/.modal.toml` to use.
pub(crate) const PROFILE_ENV: &str = "MODAL_PROFILE";
/// Another place for Modal's TOML file.
pub(crate) const CONFIG_PATH_ENV: &str = "MODAL_CONFIG_PATH";
/// Modal's API, as Modal's own client names it.
pub(crate) const SERVER_URL_ENV: &str = "MODAL_SERVER_URL";
/// The name Garrison used for [`SERVER_URL_ENV`] before; still read when
/// `MODAL_SERVER_URL` is not set.
pub(crate) const API_URL_ENV: &str = "MODAL_API_URL";
/// The Modal environment apps and sandboxes live in.
pub(crate) const ENVIRONMENT_ENV: &str = "MODAL_ENVIRONMENT";
/// Modal ends a sandbox idle this long.
pub(crate) const IDLE_TIMEOUT_ENV: &str = "MODAL_SANDBOX_IDLE_TIMEOUT_SECS";
/// `gvisor` or `vm`.
pub(crate) const RUNTIME_ENV: &str = "MODAL_SANDBOX_RUNTIME";
/// The image sessions boot from.
pub(crate) const IMAGE_ENV: &str = "MODAL_IMAGE";
/// Regions sandboxes may run in.
pub(crate) const REGION_ENV: &str = "MODAL_REGION";
/// A sandbox's maximum lifetime in seconds.
pub(crate) const TIMEOUT_ENV: &str = "MODAL_SANDBOX_TIMEOUT_SECS";

/// Modal's longest sandbox lifetime, and the default.
pub(crate) const MAX_TIMEOUT_SECS: u64 = 24 * 3600;

/// The Modal settings, validated.
#[derive(Clone, Debug)]
pub struct ModalEnv {
    /// Modal's API, without a trailing slash.
    pub api_url: String,
    /// The Modal token; never printed.
    pub credentials: crate::Credentials,
    /// An image id or name; `None` uses the outpost's image or `default`.
    pub image: Option<String>,
    /// Regions sandboxes may run in; empty lets Modal choose.
    pub regions: Vec<String>,
    /// A sandbox's maximum lifetime.
    pub timeout: Duration,
    /// Modal ends a sandbox idle this long; `None`: only the lifetime.
    pub idle_timeout: Option<Duration>,
    /// The isolation sandboxes run under; `None`: Modal's default.
    pub runtime: Option<crate::Runtime>,
    /// The Modal environment (`MODAL_ENVIRONMENT`, else the profile's
    /// `environment`); `None`: the account's default one.
    pub environment: Option<String>,
}

/// Reads the Modal settings from their flags, variables and file keys
/// and, for the token, the environment or Modal's own configuration file.
pub(crate) fn resolve(host: &dyn SettingsSource) -> Result<ModalEnv, SettingsError> {
    let (credentials, profile) = credentials(host)?;
    // MODAL_API_URL is a second variable of the same setting, below
    // MODAL_SERVER_URL and above the file.
    let api_url = match host
        .flag(SERVER_URL_KEY)
        .or_else(|| host.var(SERVER_URL_ENV))
        .or_else(|| host.var(API_URL_ENV))
        .or_else(|| host.file_key(SERVER_URL_KEY))
        .or_else(|| {
            profile
                .server_url
                .clone()
                .zip(profile.path.clone())
                .map(|(value, path)| {
                    common::settings::Sourced::new(
                        value,
                        Origin::File {
                            path,
                            key: "server_url",
                            outpost: None,
                        },
                    )
                })
        }) {
        Some(value) => {
            let url = url::Url::parse(&value.value).map_err(|e| value.invalid(e.to_string()))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(value.invalid("expected an https:// URL such as https://api.modal.com"));
            }
            value.value.trim_end_matches('/').to_owned()
        }
        None => crate::client::DEFAULT_API_URL.to_owned(),
    };
    let image = match host.get(IMAGE_ENV, IMAGE_KEY) {
        Some(value) => {
            let ok = value.value.len() <= 128
                && value
                    .value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !ok {
                return Err(value.invalid("expected an image id (im-...) or an image name"));
            }
            Some(value.value)
        }
        None => None,
    };
    let regions = match host.get(REGION_ENV, REGION_KEY) {
        Some(value) => {
            let regions: Vec<String> = value
                .value
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
                .collect();
            if regions.is_empty()
                || regions
                    .iter()
                    .any(|r| !r.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            {
                return Err(
                    value.invalid("expected regions such as \"us-east\" or \"us-east,eu-west\"")
                );
            }
            regions
        }
        None => Vec::new(),
    };
    let timeout = match host.get(TIMEOUT_ENV, TIMEOUT_KEY) {
        Some(value) => Duration::from_secs(unsigned(&value, 1..=MAX_TIMEOUT_SECS as i64)?),
        None => Duration::from_secs(MAX_TIMEOUT_SECS),
    };
    let idle_timeout = match host.get(IDLE_TIMEOUT_ENV, IDLE_TIMEOUT_KEY) {
        Some(value) => Some(Duration::from_secs(unsigned(
            &value,
            1..=MAX_TIMEOUT_SECS as i64,
        )?)),
        None => None,
    };
    let runtime = match host.get(RUNTIME_ENV, RUNTIME_KEY) {
        Some(value) => Some(
            crate::Runtime::parse(&value.value)
                .ok_or_else(|| value.invalid("expected gvisor or vm"))?,
        ),
        None => None,
    };
    Ok(ModalEnv {
        api_url,
        credentials,
        image,
        regions,
        timeout,
        idle_timeout,
        runtime,
        environment: host
            .get(ENVIRONMENT_ENV, ENVIRONMENT_KEY)
            .map(|v| v.value)
            .or(profile.environment),
    })
}

/// The token, the API URL and the environment name, each from the
/// environment (the token) or Garrison's layers (the others) first and
/// else from the chosen profile of Modal's TOML file (read whenever it
/// exists, as Modal's client reads it). The file and the profile are
/// chosen by flag, variable or `garrison.toml` key, like the rest.
fn credentials(
    host: &dyn SettingsSource,
) -> Result<(crate::Credentials, profile::Profile), SettingsError> {
    let path = match host.get(CONFIG_PATH_ENV, CONFIG_PATH_KEY) {
        Some(path) => Some(PathBuf::from(path.value)),
        None => host.home().map(|home| home.join(".modal.toml")),
    };
    let wanted = host.get(PROFILE_ENV, PROFILE_KEY);
    let tokens_in_env = host.var(TOKEN_ID_ENV).is_some() && host.var(TOKEN_SECRET_ENV).is_some();
    let from_file = match &path {
        Some(path) => match profile::read(path, wanted.as_ref().map(|p| p.value.as_str())) {
            Ok(found) => found.unwrap_or_default(),
            // With the token in the environment, a file Garrison cannot use
            // only loses its server_url and environment.
            Err(_) if tokens_in_env => profile::Profile::default(),
            Err(e) => return Err(e),
        },
        None => profile::Profile::default(),
    };
    match (host.var(TOKEN_ID_ENV), host.var(TOKEN_SECRET_ENV)) {
        (Some(id), Some(secret)) => return Ok((pair(&id.value, &secret.value), from_file)),
        (Some(_), None) | (None, Some(_)) => {
            return Err(SettingsError::Invalid {
                origin: Origin::Env(if host.var(TOKEN_ID_ENV).is_some() {
                    TOKEN_SECRET_ENV
                } else {
                    TOKEN_ID_ENV
                }),
                reason: format!("set both {TOKEN_ID_ENV} and {TOKEN_SECRET_ENV}, or neither"),
            });
        }
        (None, None) => {}
    }
    let Some(path) = path else {
        return Err(SettingsError::NoHome {
            what: "Modal token file",
            hint: "set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET",
        });
    };
    match &from_file.credentials {
        Some(credentials) => Ok((credentials.clone(), from_file)),
        None => Err(SettingsError::Invalid {
            origin: Origin::Env(TOKEN_ID_ENV),
            reason: format!(
                "no Modal token: set {TOKEN_ID_ENV} and {TOKEN_SECRET_ENV}, or run `modal token new` \
                 (which writes {})",
                path.display()
            ),
        }),
    }
}

pub(crate) fn pair(id: &str, secret: &str) -> crate::Credentials {
    crate::Credentials {
        token_id: Secret::new(id),
        token_secret: Secret::new(secret),
    }
}

impl ConfiguredBackend for ModalEnv {
    fn secrets(&self) -> Vec<Secret> {
        vec![
            self.credentials.token_id.clone(),
            self.credentials.token_secret.clone(),
        ]
    }

    /// Image names are looked up in the cache that `garrison image build
    /// --backend modal` writes under the state directory.
    fn build(&self, placement: &Placement) -> anyhow::Result<Arc<dyn Sandbox>> {
        Ok(Arc::new(crate::ModalBackend::new(crate::ModalSettings {
            client: crate::ClientConfig {
                api_url: self.api_url.clone(),
                credentials: self.credentials.clone(),
                retry: crate::RetryPolicy::default(),
            },
            // The orchestrator keeps to its outpost's sandboxes by their labels.
            outpost_id: None,
            image: self.image.clone(),
            image_cache: Some(crate::image::ImageCache::path(&placement.state_dir)),
            memory_records: Some(placement.state_dir.join("modal").join("memory")),
            regions: self.regions.clone(),
            timeout: self.timeout,
            idle_timeout: self.idle_timeout,
            runtime: self.runtime,
            environment: self.environment.clone(),
        })?))
    }

    fn deployment(&self) -> Option<&dyn Deployment> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
