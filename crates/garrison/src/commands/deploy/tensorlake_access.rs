//! Reaching Tensorlake from `deploy`, with the same settings `serve` reads
//! (`TENSORLAKE_API_KEY` or `TENSORLAKE_API_KEY_FILE`, `TENSORLAKE_API_URL`,
//! `TENSORLAKE_SANDBOX_ROOT`, from the environment or the TOML file) and
//! without a Devin token.

use std::path::{Path, PathBuf};

use common::settings::SettingsError;
use orchestrator::settings::{self, BackendSource, HostEnv, RawSettings};
use tensorlake::TensorlakeSettings;

use crate::backends;

/// The settings file to read: `explicit`, else the default one if it exists.
pub(super) fn config_path(explicit: Option<&Path>) -> Option<PathBuf> {
    backends::settings_file(&HostEnv::current(), explicit)
}

/// The Tensorlake settings; `None` when no API key is configured.
pub(super) fn settings(config: Option<&Path>) -> anyhow::Result<Option<TensorlakeSettings>> {
    let host = HostEnv::current();
    let file = match config_path(config) {
        Some(path) => settings::load_file(&path, &backends::ALL)?.unwrap_or_default(),
        None => RawSettings::default(),
    };
    match tensorlake::settings::resolve(&BackendSource::new(&host, &file.backend_keys)) {
        Ok(s) => Ok(Some(s)),
        Err(SettingsError::Missing(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A lifecycle client from [`settings`], or an error saying what to set.
pub(super) fn client(
    config: Option<&Path>,
) -> anyhow::Result<(tensorlake::Client, TensorlakeSettings)> {
    let s = settings(config)?
        .ok_or_else(|| SettingsError::Missing(tensorlake::settings::NO_KEY.to_owned()))?;
    let client = s.client()?;
    Ok((client, s))
}
