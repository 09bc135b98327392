//! How `garrison serve`'s command line, environment, TOML file and
//! credentials file become a [`ServeConfig`].

use std::path::{Path, PathBuf};

use orchestrator::settings::{
    self, HostEnv, Origin, ProcessSettings, RawSettings, ServeConfig, SettingsError, Sourced, names,
};

use super::args::ServeArgs;
use super::flags::flag;

/// The TOML file layer: the file named by `--config`, else by
/// `GARRISON_CONFIG_FILE` (which must exist), else the default file if
/// there is one. (The file's name is not a setting of [`RawSettings`], so
/// its variable is read here, next to its flag.)
pub(crate) fn file_layer(
    config_flag: Option<&Path>,
    host: &HostEnv,
) -> Result<RawSettings, SettingsError> {
    let named = match config_flag {
        Some(path) => Some(flag(path.to_owned(), names::CONFIG)),
        None => names::CONFIG.env.and_then(|var| {
            Some(Sourced::new(
                PathBuf::from(host.var(var)?),
                Origin::Env(var),
            ))
        }),
    };
    if let Some(path) = named {
        return settings::load_file(&path.value, &crate::backends::ALL)?
            .ok_or_else(|| path.invalid(format!("{} does not exist", path.value.display())));
    }
    // Without a configuration directory (no HOME) there is simply no
    // default file; what is then missing is reported by `settings::resolve`.
    match host.config_file_path() {
        Ok(path) => Ok(settings::load_file(&path, &crate::backends::ALL)?.unwrap_or_default()),
        Err(_) => Ok(RawSettings::default()),
    }
}

/// Everything `garrison serve` runs with: the command line and environment,
/// the TOML file and the credentials file, validated.
pub(crate) fn resolve(args: &ServeArgs) -> Result<ServeConfig, SettingsError> {
    resolve_all(args).map(|(config, _)| config)
}

/// [`resolve`], and the settings of the process itself (its log format and
/// admin listener). Every error is a [`SettingsError`] naming the setting:
/// a configuration error, which `main` reports with its own exit code.
pub(crate) fn resolve_all(
    args: &ServeArgs,
) -> Result<(ServeConfig, ProcessSettings), SettingsError> {
    let host = HostEnv::current();
    let file = file_layer(args.config.as_deref(), &host)?;

    // Without a configuration directory there is no credentials file either.
    let credentials_path = host
        .config_dir()
        .ok()
        .map(|dir| dir.join(settings::CREDENTIALS_FILE_NAME));
    let credentials = match &credentials_path {
        Some(path) => settings::load_credentials(path)?,
        None => None,
    };
    let stored = credentials_path.as_deref().zip(credentials.as_ref());

    let raw = args.to_raw(&host).or(file);
    let process = settings::resolve_process(&raw)?;
    let config = settings::resolve(raw, stored, &host, &crate::backends::ALL)?;
    Ok((config, process))
}
