//! The settings of the Modal backend (`--backend modal`), and its plug-in.
//!
//! All come from the environment, so they sit beside the outpost's own
//! settings without changing the file format:
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `MODAL_TOKEN_ID`, `MODAL_TOKEN_SECRET` | the Modal token | Modal's own `~/.modal.toml` (0600) |
//! | `MODAL_PROFILE` | the profile of `~/.modal.toml` to use | the `active` one, or the only one |
//! | `MODAL_CONFIG_PATH` | another place for Modal's TOML file | `~/.modal.toml` |
//! | `MODAL_SERVER_URL` (or its older alias `MODAL_API_URL`) | Modal's API, as Modal's own client reads it | the profile's `server_url`, else `https://api.modal.com` |
//! | `MODAL_ENVIRONMENT` | the Modal environment | the profile's `environment`, else the account's default |
//! | `MODAL_IMAGE` | image id (`im-...`) or a name built with `garrison image build --backend modal` | the outpost's image, else `default` |
//! | `MODAL_REGION` | comma-separated regions sandboxes may run in | Modal's choice |
//! | `MODAL_SANDBOX_TIMEOUT_SECS` | a sandbox's maximum lifetime, 1 to 86400 | 86400 |
//! | `MODAL_SANDBOX_IDLE_TIMEOUT_SECS` | Modal ends a sandbox idle this long, 1 to 86400 | none |
//! | `MODAL_SANDBOX_RUNTIME` | `gvisor` or `vm` | Modal's default (gVisor) |
//!
//! The token is never taken from a flag (argv is visible to every user of
//! the machine) and never printed: it is kept in [`common::Secret`]s.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod profile;

pub use profile::{Profile, read as read_modal_profile};

use common::Secret;
use common::settings::{Origin, SettingsError, SettingsSource, unsigned};
use sandbox::Sandbox;
use sandbox::plugin::{BackendPlugin, ConfiguredBackend, Placement};

/// The token's id.
pub const TOKEN_ID_ENV: &str = "MODAL_TOKEN_ID";
/// The token's secret.
pub const TOKEN_SECRET_ENV: &str = "MODAL_TOKEN_SECRET";
/// The profile of `~/.modal.toml` to use.
pub const PROFILE_ENV: &str = "MODAL_PROFILE";
/// Another place for Modal's TOML file.
pub const CONFIG_PATH_ENV: &str = "MODAL_CONFIG_PATH";
/// Modal's API, as Modal's own client names it.
pub const SERVER_URL_ENV: &str = "MODAL_SERVER_URL";
/// The name Garrison used for [`SERVER_URL_ENV`] before; still read when
/// `MODAL_SERVER_URL` is not set.
pub const API_URL_ENV: &str = "MODAL_API_URL";
/// The Modal environment apps and sandboxes live in.
pub const ENVIRONMENT_ENV: &str = "MODAL_ENVIRONMENT";
/// Modal ends a sandbox idle this long.
pub const IDLE_TIMEOUT_ENV: &str = "MODAL_SANDBOX_IDLE_TIMEOUT_SECS";
/// `gvisor` or `vm`.
pub const RUNTIME_ENV: &str = "MODAL_SANDBOX_RUNTIME";
/// The image sessions boot from.
pub const IMAGE_ENV: &str = "MODAL_IMAGE";
/// Regions sandboxes may run in.
pub const REGION_ENV: &str = "MODAL_REGION";
/// A sandbox's maximum lifetime in seconds.
pub const TIMEOUT_ENV: &str = "MODAL_SANDBOX_TIMEOUT_SECS";

/// Modal's longest sandbox lifetime, and the default.
pub const MAX_TIMEOUT_SECS: u64 = 24 * 3600;

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

/// Reads the Modal settings from the environment and, for the token,
/// Modal's own configuration file.
pub fn resolve(host: &dyn SettingsSource) -> Result<ModalEnv, SettingsError> {
    let env = |name: &'static str| host.var(name);
    let (credentials, profile) = credentials(host)?;
    let api_url = match env(SERVER_URL_ENV)
        .or_else(|| env(API_URL_ENV))
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
    let image = match env(IMAGE_ENV) {
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
    let regions = match env(REGION_ENV) {
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
    let timeout = match env(TIMEOUT_ENV) {
        Some(value) => Duration::from_secs(unsigned(&value, 1..=MAX_TIMEOUT_SECS as i64)?),
        None => Duration::from_secs(MAX_TIMEOUT_SECS),
    };
    let idle_timeout = match env(IDLE_TIMEOUT_ENV) {
        Some(value) => Some(Duration::from_secs(unsigned(
            &value,
            1..=MAX_TIMEOUT_SECS as i64,
        )?)),
        None => None,
    };
    let runtime = match env(RUNTIME_ENV) {
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
        environment: env(ENVIRONMENT_ENV)
            .map(|v| v.value)
            .or(profile.environment),
    })
}

/// The token, the API URL and the environment name, each from the
/// environment first and else from the chosen profile of Modal's TOML file
/// (read whenever it exists, as Modal's client reads it).
fn credentials(
    host: &dyn SettingsSource,
) -> Result<(crate::Credentials, profile::Profile), SettingsError> {
    let path = match host.var(CONFIG_PATH_ENV) {
        Some(path) => Some(PathBuf::from(path.value)),
        None => host.home().map(|home| home.join(".modal.toml")),
    };
    let wanted = host.var(PROFILE_ENV);
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

/// The Modal backend as the registry lists it.
pub struct ModalPlugin;

/// The one [`ModalPlugin`].
pub static PLUGIN: ModalPlugin = ModalPlugin;

impl BackendPlugin for ModalPlugin {
    fn name(&self) -> &'static str {
        "modal"
    }

    fn summary(&self) -> &'static str {
        "a Modal Sandbox per session"
    }

    fn settings_help(&self) -> &'static str {
        "  MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (never flags; else the profile of
  ~/.modal.toml chosen by MODAL_PROFILE, or MODAL_CONFIG_PATH), MODAL_SERVER_URL
  (alias MODAL_API_URL; else server_url of the profile) [default:
  https://api.modal.com], MODAL_ENVIRONMENT (else the profile's), MODAL_IMAGE,
  MODAL_REGION, MODAL_SANDBOX_TIMEOUT_SECS (a sandbox's lifetime)
  [default: 86400], MODAL_SANDBOX_IDLE_TIMEOUT_SECS, MODAL_SANDBOX_RUNTIME
  (gvisor or vm).
  Environment only."
    }

    fn setup_hint(&self) -> &'static str {
        "set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or run `modal token new`, which writes \
         ~/.modal.toml), and MODAL_SERVER_URL only for a non-default endpoint"
    }

    fn has_remote_api(&self) -> bool {
        true
    }

    fn configure(
        &self,
        settings: &dyn SettingsSource,
    ) -> Result<Arc<dyn ConfiguredBackend>, SettingsError> {
        Ok(Arc::new(resolve(settings)?))
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
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use super::*;

    fn host(vars: &[(&str, &str)]) -> common::settings::MapSource {
        let mut source = common::settings::MapSource::vars(vars);
        source.home = vars
            .iter()
            .find(|(k, _)| *k == "HOME")
            .map(|(_, v)| PathBuf::from(v));
        source
    }

    fn write(path: &Path, text: &str, mode: u32) {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn defaults_with_a_token_from_the_environment() {
        let m = resolve(&host(&[(TOKEN_ID_ENV, "ak-1"), (TOKEN_SECRET_ENV, "as-1")])).unwrap();
        assert_eq!(m.api_url, "https://api.modal.com");
        assert_eq!(m.credentials.token_id.expose(), "ak-1");
        assert_eq!(m.credentials.token_secret.expose(), "as-1");
        assert_eq!(m.timeout, Duration::from_secs(86400));
        assert!(m.regions.is_empty() && m.image.is_none());
        assert!(!format!("{m:?}").contains("as-1"));
    }

    #[test]
    fn every_setting_is_read_and_checked() {
        let base = [(TOKEN_ID_ENV, "ak-1"), (TOKEN_SECRET_ENV, "as-1")];
        let with = |extra: &[(&str, &str)]| {
            let mut vars = base.to_vec();
            vars.extend_from_slice(extra);
            resolve(&host(&vars))
        };
        let m = with(&[
            (API_URL_ENV, "http://127.0.0.1:9000/"),
            (IMAGE_ENV, "im-abc"),
            (REGION_ENV, "us-east, eu-west"),
            (TIMEOUT_ENV, "600"),
            (IDLE_TIMEOUT_ENV, "900"),
            (RUNTIME_ENV, "vm"),
        ])
        .unwrap();
        assert_eq!(m.idle_timeout, Some(Duration::from_secs(900)));
        assert_eq!(m.runtime, Some(crate::Runtime::Vm));
        assert_eq!(m.api_url, "http://127.0.0.1:9000");
        assert_eq!(m.image.as_deref(), Some("im-abc"));
        assert_eq!(m.regions, ["us-east", "eu-west"]);
        assert_eq!(m.timeout, Duration::from_secs(600));
        for (var, bad) in [
            (API_URL_ENV, "ftp://x"),
            (IMAGE_ENV, "../etc"),
            (REGION_ENV, "us east"),
            (TIMEOUT_ENV, "0"),
            (TIMEOUT_ENV, "86401"),
            (IDLE_TIMEOUT_ENV, "0"),
            (RUNTIME_ENV, "firecracker"),
            (SERVER_URL_ENV, "not a url"),
        ] {
            let err = with(&[(var, bad)]).unwrap_err().to_string();
            assert!(err.contains(var), "{var}={bad}: {err}");
        }
        let err = resolve(&host(&[(TOKEN_ID_ENV, "ak-1"), ("HOME", "/nonexistent")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(TOKEN_SECRET_ENV), "{err}");
    }

    #[test]
    fn modal_server_url_is_read_first_and_modal_api_url_is_its_alias() {
        let base = [(TOKEN_ID_ENV, "ak-1"), (TOKEN_SECRET_ENV, "as-1")];
        let url = |extra: &[(&str, &str)]| {
            let mut vars = base.to_vec();
            vars.extend_from_slice(extra);
            resolve(&host(&vars)).unwrap().api_url
        };
        assert_eq!(
            url(&[(SERVER_URL_ENV, "http://127.0.0.1:1/")]),
            "http://127.0.0.1:1"
        );
        assert_eq!(
            url(&[(API_URL_ENV, "http://127.0.0.1:2")]),
            "http://127.0.0.1:2"
        );
        assert_eq!(
            url(&[
                (SERVER_URL_ENV, "http://127.0.0.1:1"),
                (API_URL_ENV, "http://127.0.0.1:2")
            ]),
            "http://127.0.0.1:1"
        );
    }

    #[test]
    fn the_token_comes_from_modals_own_file_when_not_in_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".modal.toml");
        write(
            &path,
            "[a]\ntoken_id = \"ak-a\"\ntoken_secret = \"as-a\"\n\n[b]\ntoken_id = \"ak-b\"\ntoken_secret = \"as-b\"\nactive = true\n",
            0o600,
        );
        let home = dir.path().to_str().unwrap();
        let m = resolve(&host(&[("HOME", home)])).unwrap();
        assert_eq!(m.credentials.token_id.expose(), "ak-b");
        let m = resolve(&host(&[("HOME", home), (PROFILE_ENV, "a")])).unwrap();
        assert_eq!(m.credentials.token_secret.expose(), "as-a");
        let err = resolve(&host(&[("HOME", home), (PROFILE_ENV, "c")])).unwrap_err();
        assert!(err.to_string().contains("[c]"), "{err}");

        // A file other users can read is refused, and never quoted.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = resolve(&host(&[("HOME", home)])).unwrap_err().to_string();
        assert!(err.contains("chmod 600") && !err.contains("as-b"), "{err}");

        // No file, no variables: the message says what to do.
        let err = resolve(&host(&[("HOME", "/nonexistent")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("modal token new"), "{err}");
    }
}
