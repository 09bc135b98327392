//! The settings of the Tensorlake backend (`--backend tensorlake`), and its
//! plug-in.
//!
//! They have no flags: the API key must never be in argv, and the rest are
//! set once per host. Each is read from the environment, else from the
//! top-level key of `garrison.toml` named beside it:
//!
//! | variable | file key | meaning | default |
//! | --- | --- | --- | --- |
//! | `TENSORLAKE_API_KEY` | (never in the file) | the API key | required |
//! | `TENSORLAKE_API_KEY_FILE` | `tensorlake_api_key_file` | a 0600 file holding the key, if the variable is unset | |
//! | `TENSORLAKE_API_URL` | `tensorlake_api_url` | the API | [`crate::DEFAULT_API_URL`] |
//! | `TENSORLAKE_SANDBOX_API_URL` | `tensorlake_sandbox_api_url` | where lifecycle calls (`/sandboxes`, `/snapshots`) go, as the official SDK reads it | derived from the API URL: `api.X` becomes `sandbox.X` ([`crate::urls`]) |
//! | `TENSORLAKE_IMAGE` | `tensorlake_image` | the image when the outpost names none | Tensorlake's default |
//! | `SANDBOX_TIMEOUT_SECS` | `sandbox_timeout_secs` | idle seconds before Tensorlake suspends a sandbox, 0 to 30 days | 1800 |
//! | `TENSORLAKE_SANDBOX_ROOT` | `tensorlake_sandbox_root` | Garrison's directory inside each sandbox (`{id}`: the sandbox id) | `/garrison` |

use std::path::Path;
use std::sync::Arc;

use common::Secret;
use common::settings::{
    Kind, Setting, SettingsError, SettingsSource, Sourced, http_url, image, read_secret_file,
    unsigned,
};
use sandbox::Sandbox;
use sandbox::plugin::deploy::Deployment;
use sandbox::plugin::{ConfiguredBackend, LogFollower, Placement};

use crate::backend::DEFAULT_SANDBOX_ROOT;

/// The API key itself: the environment only, like the Devin token.
pub(crate) const API_KEY_ENV: &str = "TENSORLAKE_API_KEY";
/// The environment variable naming a 0600 file that holds the API key.
pub(crate) const API_KEY_FILE_ENV: &str = "TENSORLAKE_API_KEY_FILE";
/// The settings-file key of the same.
pub(crate) const API_KEY_FILE_KEY: &str = "tensorlake_api_key_file";
/// The environment variable of the API URL.
pub(crate) const API_URL_ENV: &str = "TENSORLAKE_API_URL";
/// The settings-file key of the API URL.
pub(crate) const API_URL_KEY: &str = "tensorlake_api_url";
/// The environment variable of the lifecycle calls' URL.
pub(crate) const SANDBOX_API_URL_ENV: &str = "TENSORLAKE_SANDBOX_API_URL";
/// The settings-file key of the lifecycle calls' URL.
pub(crate) const SANDBOX_API_URL_KEY: &str = "tensorlake_sandbox_api_url";
/// The environment variable of the default image.
pub(crate) const IMAGE_ENV: &str = "TENSORLAKE_IMAGE";
/// The settings-file key of the default image.
pub(crate) const IMAGE_KEY: &str = "tensorlake_image";
/// The environment variable of the idle timeout, in seconds.
pub(crate) const TIMEOUT_SECS_ENV: &str = "SANDBOX_TIMEOUT_SECS";
/// The settings-file key of the idle timeout.
pub(crate) const TIMEOUT_SECS_KEY: &str = "sandbox_timeout_secs";
/// The environment variable of Garrison's directory inside each sandbox.
pub(crate) const SANDBOX_ROOT_ENV: &str = "TENSORLAKE_SANDBOX_ROOT";
/// The settings-file key of the same.
pub(crate) const SANDBOX_ROOT_KEY: &str = "tensorlake_sandbox_root";

/// The Tensorlake backend's settings (no flags: set once per host).
pub(crate) const SETTINGS: &[Setting] = &[
    Setting::secret(
        "tensorlake_api_key",
        API_KEY_ENV,
        "The Tensorlake API key (or a 0600 file named by tensorlake_api_key_file)",
    ),
    Setting::new(
        API_KEY_FILE_KEY,
        "",
        API_KEY_FILE_ENV,
        Kind::Path,
        "A file of mode 0600 holding the Tensorlake API key, if TENSORLAKE_API_KEY is unset",
    )
    .no_flag()
    .example("\"/etc/garrison/tensorlake.key\""),
    Setting::new(
        API_URL_KEY,
        "",
        API_URL_ENV,
        Kind::Text,
        "The Tensorlake API",
    )
    .no_flag()
    .default("\"https://api.tensorlake.ai\""),
    Setting::new(
        SANDBOX_API_URL_KEY,
        "",
        SANDBOX_API_URL_ENV,
        Kind::Text,
        "Where lifecycle calls go, as the official SDK reads it",
    )
    .no_flag()
    .described_default("the API URL's host with api. made sandbox.")
    .example("\"https://sandbox.tensorlake.ai\""),
    Setting::new(
        IMAGE_KEY,
        "",
        IMAGE_ENV,
        Kind::Text,
        "The Tensorlake image when the outpost names none",
    )
    .no_flag()
    .described_default("Tensorlake's")
    .example("\"garrison-default\""),
    Setting::new(
        TIMEOUT_SECS_KEY,
        "",
        TIMEOUT_SECS_ENV,
        Kind::Int {
            min: 0,
            max: MAX_SANDBOX_TIMEOUT_SECS,
        },
        "Idle seconds before Tensorlake suspends a sandbox (0: Tensorlake's plan decides)",
    )
    .no_flag()
    .default("1800"),
    Setting::new(
        SANDBOX_ROOT_KEY,
        "",
        SANDBOX_ROOT_ENV,
        Kind::Text,
        "Garrison's directory inside each sandbox ({id}: the sandbox id)",
    )
    .no_flag()
    .default("\"/garrison\""),
];

/// Thirty days: the longest idle time Garrison asks for.
const MAX_SANDBOX_TIMEOUT_SECS: i64 = 30 * 24 * 3600;

/// Idle seconds before Tensorlake suspends a session's sandbox (the seed's
/// `SANDBOX_TIMEOUT_SECS` default).
pub(crate) const DEFAULT_SANDBOX_TIMEOUT_SECS: u64 = 1800;

/// What to do when no key is configured.
pub(crate) const NO_KEY: &str = "the tensorlake backend needs an API key: set TENSORLAKE_API_KEY, or \
     TENSORLAKE_API_KEY_FILE to a file of mode 0600 holding it";

/// How to reach Tensorlake and what its sandboxes get. `Debug` never shows
/// the key.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorlakeSettings {
    /// The API URL.
    pub api_url: String,
    /// The lifecycle calls' URL when set (else derived from `api_url`).
    pub sandbox_api_url: Option<String>,
    /// The API key.
    pub api_key: Secret,
    /// The image when the outpost names none.
    pub image: Option<String>,
    /// Idle seconds before Tensorlake suspends a sandbox.
    pub timeout_secs: u64,
    /// Garrison's directory inside each sandbox (`{id}`: the sandbox id).
    pub sandbox_root: String,
}

/// The Tensorlake settings: the API key from `TENSORLAKE_API_KEY`, else
/// from the file `TENSORLAKE_API_KEY_FILE` names (refused if other users
/// may read it). [`SettingsError::Missing`] when no key is configured.
pub fn resolve(source: &dyn SettingsSource) -> Result<TensorlakeSettings, SettingsError> {
    let key_file = source.get(API_KEY_FILE_ENV, API_KEY_FILE_KEY);
    let api_key = match (source.var(API_KEY_ENV), key_file) {
        (Some(key), _) => Sourced::new(Secret::new(key.value), key.origin),
        (None, Some(path)) => Sourced::new(read_secret_file(Path::new(&path.value))?, path.origin),
        (None, None) => return Err(SettingsError::Missing(NO_KEY.to_owned())),
    };
    if api_key.value.is_empty() {
        return Err(SettingsError::Missing(NO_KEY.to_owned()));
    }
    if api_key
        .value
        .expose()
        .chars()
        .any(|c| c.is_control() || c == ' ')
    {
        return Err(api_key.invalid("the API key has spaces or control characters"));
    }
    let api_url = match source.get(API_URL_ENV, API_URL_KEY) {
        Some(value) => http_url(&value)?.as_str().trim_end_matches('/').to_owned(),
        None => crate::DEFAULT_API_URL.to_owned(),
    };
    let sandbox_api_url = match source.get(SANDBOX_API_URL_ENV, SANDBOX_API_URL_KEY) {
        Some(value) => Some(
            crate::urls::parse_sandbox_api_url(&value.value)
                .map_err(|e| value.invalid(e.to_string()))?
                .as_str()
                .trim_end_matches('/')
                .to_owned(),
        ),
        None => None,
    };
    let image = source
        .get(IMAGE_ENV, IMAGE_KEY)
        .as_ref()
        .map(image)
        .transpose()?;
    let timeout_secs = match source.get(TIMEOUT_SECS_ENV, TIMEOUT_SECS_KEY) {
        // Up to 30 days; 0 would leave the choice to Tensorlake's plan.
        Some(value) => unsigned(&value, 0..=MAX_SANDBOX_TIMEOUT_SECS)?,
        None => DEFAULT_SANDBOX_TIMEOUT_SECS,
    };
    let sandbox_root = match source.get(SANDBOX_ROOT_ENV, SANDBOX_ROOT_KEY) {
        Some(root) => sandbox_root(&root)?,
        None => DEFAULT_SANDBOX_ROOT.to_owned(),
    };
    Ok(TensorlakeSettings {
        api_url,
        sandbox_api_url,
        api_key: api_key.value,
        image,
        timeout_secs,
        sandbox_root,
    })
}

impl TensorlakeSettings {
    /// A lifecycle client for these settings.
    pub fn client(&self) -> crate::Result<crate::Client> {
        crate::Client::new(&self.api_url, self.api_key.clone())?
            .with_sandbox_api_url(self.sandbox_api_url.as_deref())
    }
}

fn sandbox_root(root: &Sourced<String>) -> Result<String, SettingsError> {
    let path = Path::new(&root.value);
    let clean = path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir));
    if !clean || root.value.chars().any(char::is_control) {
        return Err(root.invalid(format!(
            "expected an absolute directory inside the sandbox, such as {DEFAULT_SANDBOX_ROOT:?}"
        )));
    }
    Ok(root.value.clone())
}

impl ConfiguredBackend for TensorlakeSettings {
    fn secrets(&self) -> Vec<Secret> {
        vec![self.api_key.clone()]
    }

    fn build(&self, placement: &Placement) -> anyhow::Result<Arc<dyn Sandbox>> {
        Ok(Arc::new(crate::TensorlakeBackend::new(
            crate::TensorlakeConfig {
                api_url: self.api_url.clone(),
                sandbox_api_url: self.sandbox_api_url.clone(),
                api_key: self.api_key.clone(),
                default_image: self.image.clone(),
                timeout_secs: self.timeout_secs,
                sandbox_root: self.sandbox_root.clone(),
                state_dir: placement.state_dir.join("tensorlake"),
                retry: Default::default(),
            },
        )?))
    }

    fn log_follower(&self, session_id: &str) -> anyhow::Result<Option<Box<dyn LogFollower>>> {
        let client = self.client()?;
        Ok(Some(Box::new(crate::follow::Follower::new(
            client, self, session_id,
        ))))
    }

    fn deployment(&self) -> Option<&dyn Deployment> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use common::settings::{MapSource, Origin};

    use super::*;
    use crate::PLUGIN;
    use sandbox::plugin::BackendPlugin;

    const TL_KEY: &str = "tl_test_key_do_not_print_0123456789";

    fn err(source: &MapSource) -> String {
        resolve(source).expect_err("should be refused").to_string()
    }

    #[test]
    fn defaults_and_every_setting_from_the_environment() {
        let tl = resolve(&MapSource::vars(&[(API_KEY_ENV, TL_KEY)])).unwrap();
        assert_eq!(tl.api_key.expose(), TL_KEY);
        assert_eq!(tl.api_url, crate::DEFAULT_API_URL);
        assert_eq!(tl.timeout_secs, DEFAULT_SANDBOX_TIMEOUT_SECS);
        assert_eq!(tl.sandbox_root, DEFAULT_SANDBOX_ROOT);
        assert_eq!(tl.image, None);
        assert_eq!(tl.sandbox_api_url, None);
        assert_eq!(
            tl.client().unwrap().sandbox_api_url().as_str(),
            "https://sandbox.tensorlake.ai/"
        );
        assert!(!format!("{tl:?}").contains(TL_KEY));

        let tl = resolve(&MapSource::vars(&[
            (API_KEY_ENV, TL_KEY),
            ("TENSORLAKE_API_URL", "http://127.0.0.1:9000"),
            ("TENSORLAKE_IMAGE", "devin-outposts"),
            ("SANDBOX_TIMEOUT_SECS", "600"),
            ("TENSORLAKE_SANDBOX_ROOT", "/srv/garrison/{id}"),
            ("TENSORLAKE_SANDBOX_API_URL", "http://127.0.0.1:9001/"),
        ]))
        .unwrap();
        assert_eq!(tl.api_url, "http://127.0.0.1:9000");
        assert_eq!(tl.sandbox_api_url.as_deref(), Some("http://127.0.0.1:9001"));
        assert_eq!(
            tl.client().unwrap().sandbox_api_url().as_str(),
            "http://127.0.0.1:9001/"
        );
        assert_eq!(tl.image.as_deref(), Some("devin-outposts"));
        assert_eq!(tl.timeout_secs, 600);
        assert_eq!(tl.sandbox_root, "/srv/garrison/{id}");
    }

    #[test]
    fn the_sandbox_api_url_is_in_the_help_and_the_file_keys() {
        assert!(
            PLUGIN
                .settings_help()
                .contains("TENSORLAKE_SANDBOX_API_URL")
        );
        assert!(PLUGIN.file_keys().contains(&SANDBOX_API_URL_KEY));
    }

    #[test]
    fn settings_come_from_the_file_too_and_the_environment_wins() {
        let file = "/etc/garrison/garrison.toml";
        let at = |key| Origin::file(Path::new(file), key, None);
        let mut source = MapSource::vars(&[(API_KEY_ENV, TL_KEY), (IMAGE_ENV, "from-env")]);
        for (key, value) in [(IMAGE_KEY, "img"), (TIMEOUT_SECS_KEY, "60")] {
            source
                .file
                .insert(key.to_owned(), Sourced::new(value.to_owned(), at(key)));
        }
        let tl = resolve(&source).unwrap();
        assert_eq!(tl.image.as_deref(), Some("from-env"));
        assert_eq!(tl.timeout_secs, 60);

        source.file.insert(
            TIMEOUT_SECS_KEY.to_owned(),
            Sourced::new("soon".to_owned(), at(TIMEOUT_SECS_KEY)),
        );
        assert!(err(&source).contains(&format!("sandbox_timeout_secs in {file}")));
    }

    #[test]
    fn errors_name_the_setting_and_never_the_key() {
        assert!(err(&MapSource::default()).contains("TENSORLAKE_API_KEY"));
        for (var, value) in [
            ("SANDBOX_TIMEOUT_SECS", "soon"),
            ("TENSORLAKE_API_URL", "not a url"),
            ("TENSORLAKE_SANDBOX_API_URL", "sandbox.example.com"),
            ("TENSORLAKE_SANDBOX_API_URL", "https://x/?q=1"),
            ("TENSORLAKE_SANDBOX_ROOT", "relative/dir"),
            ("TENSORLAKE_SANDBOX_ROOT", "/a/../b"),
        ] {
            let message = err(&MapSource::vars(&[(API_KEY_ENV, TL_KEY), (var, value)]));
            assert!(message.contains(var), "{var}: {message}");
            assert!(!message.contains(TL_KEY), "{message}");
        }
        let message = err(&MapSource::vars(&[(API_KEY_ENV, "two words")]));
        assert!(message.contains("TENSORLAKE_API_KEY"), "{message}");
        assert!(!message.contains("two words"), "{message}");
    }

    #[test]
    fn the_key_file_must_be_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tensorlake-key");
        fs::write(&path, format!("{TL_KEY}\n")).unwrap();
        let path_text = path.to_str().unwrap();
        let from_file = MapSource::vars(&[(API_KEY_FILE_ENV, path_text)]);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(err(&from_file).contains("chmod 600"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(resolve(&from_file).unwrap().api_key.expose(), TL_KEY);
        // The variable wins over the file.
        let tl = resolve(&MapSource::vars(&[
            (API_KEY_ENV, "from-the-environment"),
            (API_KEY_FILE_ENV, path_text),
        ]))
        .unwrap();
        assert_eq!(tl.api_key.expose(), "from-the-environment");
    }
}
