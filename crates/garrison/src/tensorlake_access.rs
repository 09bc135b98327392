//! Reaching Tensorlake from commands other than `serve`, with the same
//! settings (`TENSORLAKE_API_KEY` or `TENSORLAKE_API_KEY_FILE`,
//! `TENSORLAKE_API_URL`, `TENSORLAKE_SANDBOX_ROOT`, from the environment or
//! the TOML file) and without a Devin token.

use std::path::{Path, PathBuf};

use orchestrator::config::TensorlakeSettings;
use orchestrator::settings::{self, HostEnv, RawSettings, SettingsError};

/// The settings file to read: `explicit`, else the default one if it exists.
pub fn config_path(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_owned());
    }
    let path = HostEnv::current().config_file_path().ok()?;
    path.exists().then_some(path)
}

/// The Tensorlake settings; `None` when no API key is configured.
pub fn settings(config: Option<&Path>) -> anyhow::Result<Option<TensorlakeSettings>> {
    let host = HostEnv::current();
    let file = match config_path(config) {
        Some(path) => settings::load_file(&path)?.unwrap_or_default(),
        None => RawSettings::default(),
    };
    let raw = RawSettings::from_env(&host).or(file);
    match settings::tensorlake_settings(&raw) {
        Ok(s) => Ok(Some(s)),
        Err(SettingsError::NoTensorlakeKey) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A lifecycle client from [`settings`], or an error saying what to set.
pub fn client(config: Option<&Path>) -> anyhow::Result<(tensorlake::Client, TensorlakeSettings)> {
    let s = settings(config)?.ok_or(SettingsError::NoTensorlakeKey)?;
    let client = tensorlake::Client::new(&s.api_url, s.api_key.clone())?;
    Ok((client, s))
}
