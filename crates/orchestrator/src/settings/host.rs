//! The host: the effective user, the environment (read once, here) and
//! the default directories that depend on them.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::PathBuf;

use common::settings::SettingsError;

use super::resolved::{CONFIG_DIR_ENV, CONFIG_FILE_NAME, CREDENTIALS_FILE_NAME};

/// What defaults depend on: the effective user and the environment. Gathered
/// once at the edge ([`HostEnv::current`]) so the logic here stays pure.
#[derive(Clone)]
pub struct HostEnv {
    /// Effective user id; 0 selects the system-wide directories.
    pub euid: u32,
    /// Environment variables (may include the token: see the `Debug` impl).
    pub vars: BTreeMap<String, String>,
}

impl fmt::Debug for HostEnv {
    /// Names only: the values include `DEVIN_OUTPOSTS_TOKEN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostEnv")
            .field("euid", &self.euid)
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl HostEnv {
    /// A host with this user and these variables.
    pub fn new(euid: u32, vars: BTreeMap<String, String>) -> Self {
        Self { euid, vars }
    }

    /// This process's effective user and environment. Variables that are
    /// not valid UTF-8 are left out.
    pub fn current() -> Self {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self {
            euid: current_euid(),
            vars,
        }
    }

    /// A variable's value; an empty variable counts as unset, as in the
    /// seeds' `.env` templates (`OUTPOST_ID=` means "not set yet").
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn is_root(&self) -> bool {
        self.euid == 0
    }

    /// An XDG base directory; the spec says relative values are ignored.
    fn xdg_dir(&self, name: &str) -> Option<PathBuf> {
        self.var(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }

    /// The home directory, if known.
    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// `$GARRISON_CONFIG`, else `/etc/garrison` as root, else
    /// `$XDG_CONFIG_HOME/garrison` or `~/.config/garrison`.
    pub fn config_dir(&self) -> Result<PathBuf, SettingsError> {
        if let Some(dir) = self.var(CONFIG_DIR_ENV) {
            return Ok(PathBuf::from(dir));
        }
        if self.is_root() {
            return Ok(PathBuf::from("/etc/garrison"));
        }
        if let Some(dir) = self.xdg_dir("XDG_CONFIG_HOME") {
            return Ok(dir.join("garrison"));
        }
        self.home()
            .map(|home| home.join(".config/garrison"))
            .ok_or(SettingsError::NoHome {
                what: "configuration directory",
                hint: "set GARRISON_CONFIG",
            })
    }

    /// `/var/lib/garrison` as root, else `$XDG_DATA_HOME/garrison` or
    /// `~/.local/share/garrison`. (`GARRISON_HOME` is the `--state-dir`
    /// setting itself, read with the other settings.)
    pub fn default_state_dir(&self) -> Result<PathBuf, SettingsError> {
        if self.is_root() {
            return Ok(PathBuf::from("/var/lib/garrison"));
        }
        if let Some(dir) = self.xdg_dir("XDG_DATA_HOME") {
            return Ok(dir.join("garrison"));
        }
        self.home()
            .map(|home| home.join(".local/share/garrison"))
            .ok_or(SettingsError::NoHome {
                what: "state directory",
                hint: "pass --state-dir or set GARRISON_HOME",
            })
    }

    /// `<config dir>/credentials.json`.
    pub fn credentials_path(&self) -> Result<PathBuf, SettingsError> {
        Ok(self.config_dir()?.join(CREDENTIALS_FILE_NAME))
    }

    /// `<config dir>/garrison.toml`, read when `--config` is not given.
    pub fn config_file_path(&self) -> Result<PathBuf, SettingsError> {
        Ok(self.config_dir()?.join(CONFIG_FILE_NAME))
    }
}

/// The effective uid, from `/proc/self/status` (this crate has no libc
/// binding). Where that is unreadable (not Linux), the user is taken not to
/// be root: the per-user directories are the safer guess.
fn current_euid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            // "Uid:\t<real>\t<effective>\t<saved>\t<fs>"
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(2)?.parse().ok()
        })
        .unwrap_or(u32::MAX)
}

/// Where `garrison connect` saves the token for this user:
/// `$GARRISON_CONFIG/credentials.json` (see [`HostEnv::config_dir`]).
pub fn credentials_path() -> Result<PathBuf, SettingsError> {
    HostEnv::current().credentials_path()
}
