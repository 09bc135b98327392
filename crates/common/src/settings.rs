//! The vocabulary every setting is read with, whoever owns it: where a value
//! came from ([`Origin`]), a value with its origin ([`Sourced`]), the errors
//! that name the setting ([`SettingsError`]), and what a backend reads its
//! own settings from ([`SettingsSource`]).
//!
//! Garrison's own settings and each backend's are validated by their owners
//! with these types, so that every error message has the same shape: what
//! was wrong and exactly which flag, variable or file key said it.

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::ops::RangeInclusive;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::Secret;

pub mod spec;
pub use spec::{DefaultValue, Kind, Setting, or_list};

/// Where a value came from; its `Display` is the name a user would look
/// for, e.g. `SANDBOX_CPUS (environment)` or `cpus in /etc/garrison/garrison.toml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A command-line flag, e.g. `--cpus`.
    Flag(&'static str),
    /// An environment variable, e.g. `SANDBOX_CPUS`.
    Env(&'static str),
    /// A key of the TOML file; `outpost` is the id of the `[[outpost]]`
    /// table holding it, if any.
    File {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// The `[[outpost]]` table holding the key, if any.
        outpost: Option<String>,
    },
    /// A field of the credentials file.
    Credentials {
        /// The credentials file.
        path: PathBuf,
        /// The field.
        key: &'static str,
    },
}

impl Origin {
    /// A key of the TOML file at `path`.
    pub fn file(path: &Path, key: &'static str, outpost: Option<&str>) -> Self {
        Self::File {
            path: path.to_owned(),
            key,
            outpost: outpost.map(str::to_owned),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag(flag) => f.write_str(flag),
            Self::Env(var) => write!(f, "{var} (environment)"),
            Self::File {
                path,
                key,
                outpost: None,
            } => write!(f, "{key} in {}", path.display()),
            Self::File {
                path,
                key,
                outpost: Some(id),
            } => write!(f, "{key} of [[outpost]] {id:?} in {}", path.display()),
            Self::Credentials { path, key } => write!(f, "{key} in {}", path.display()),
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub origin: Origin,
}

impl<T> Sourced<T> {
    /// A value from `origin`.
    pub fn new(value: T, origin: Origin) -> Self {
        Self { value, origin }
    }

    /// The error for this value, naming where it came from.
    pub fn invalid(&self, reason: impl Into<String>) -> SettingsError {
        SettingsError::Invalid {
            origin: self.origin.clone(),
            reason: reason.into(),
        }
    }
}

/// Why settings could not be read or resolved. Every message names the
/// setting and where it came from; none ever contains a secret.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A value was given but is not acceptable.
    #[error("invalid {origin}: {reason}")]
    Invalid {
        /// Where the value came from.
        origin: Origin,
        /// Why it is refused.
        reason: String,
    },
    /// A file could not be parsed; `reason` names the key or position.
    #[error("invalid {}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        reason: String,
    },
    #[error("cannot read {}: {error}", path.display())]
    /// A file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    #[error("cannot write {}: {error}", path.display())]
    /// A file could not be written.
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// A file holding a secret grants access to other users.
    #[error(
        "refusing to read {path}: its mode {mode:04o} lets other users read or change it; \
         run `chmod 600 {path}`",
        path = path.display()
    )]
    InsecureCredentials {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    #[error(
        "no outpost to serve: pass --outpost, set OUTPOST_ID, add an [[outpost]] table, \
         or run `garrison connect`"
    )]
    /// No outpost was given and none can be found.
    NoOutpost,
    #[error("no Devin token: set DEVIN_OUTPOSTS_TOKEN or run `garrison connect`")]
    /// No Devin token was given and none was saved.
    NoToken,
    /// A setting that has no default was not given; the message says how
    /// to give it.
    #[error("{0}")]
    Missing(String),
    /// A default directory depends on `HOME`, which is not set.
    #[error("cannot choose the {what}: HOME is not set; {hint}")]
    NoHome {
        /// The directory that could not be chosen.
        what: &'static str,
        /// How to give it instead.
        hint: &'static str,
    },
}

/// What a backend reads its own settings from: the process environment, as
/// gathered once at start, and the top-level keys of `garrison.toml` that
/// the backend declared (see `sandbox::plugin`). The environment beats the
/// file, as for every other setting.
pub trait SettingsSource {
    /// A variable; an empty one counts as unset.
    fn var(&self, name: &'static str) -> Option<Sourced<String>>;
    /// A top-level key of the settings file, numbers as text.
    fn file_key(&self, key: &'static str) -> Option<Sourced<String>>;
    /// The user's home directory, for backends whose own tools keep
    /// configuration there.
    fn home(&self) -> Option<PathBuf>;

    /// The flag of the setting whose file key is `key`, if one was given
    /// (backends' settings declared with a flag: see [`Setting`]).
    fn flag(&self, _key: &'static str) -> Option<Sourced<String>> {
        None
    }

    /// The flag, else `env`, else the file's `key`.
    fn get(&self, env: &'static str, key: &'static str) -> Option<Sourced<String>> {
        self.flag(key)
            .or_else(|| self.var(env))
            .or_else(|| self.file_key(key))
    }
}

/// The text of `path`, at most `limit` bytes, from a file only its owner
/// may read: one whose mode grants group or others anything is refused (a
/// secret readable by other users must be fixed, not used). The mode is
/// that of the file actually opened, not of whatever the path names by the
/// time anyone looks again.
pub fn read_owner_only(path: &Path, limit: u64) -> Result<String, SettingsError> {
    let read_error = |error| SettingsError::Read {
        path: path.to_owned(),
        error,
    };
    let file = fs::File::open(path).map_err(read_error)?;
    let mode = file.metadata().map_err(read_error)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(SettingsError::InsecureCredentials {
            path: path.to_owned(),
            mode: mode & 0o7777,
        });
    }
    let mut text = String::new();
    file.take(limit)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    Ok(text)
}

/// [`read_owner_only`] for a file that may not exist: `Ok(None)` then.
pub fn read_owner_only_if_present(
    path: &Path,
    limit: u64,
) -> Result<Option<String>, SettingsError> {
    match read_owner_only(path, limit) {
        Ok(text) => Ok(Some(text)),
        Err(SettingsError::Read { error, .. }) if error.kind() == io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A secret from a file that only its owner may read; one trailing newline
/// is dropped.
pub fn read_secret_file(path: &Path) -> Result<Secret, SettingsError> {
    let text = read_owner_only(path, 64 * 1024)?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    Ok(Secret::new(text))
}

/// An http(s) URL with a host, no credentials, query or fragment.
pub fn http_url(value: &Sourced<String>) -> Result<url::Url, SettingsError> {
    let text = value.value.trim();
    let url =
        url::Url::parse(text).map_err(|e| value.invalid(format!("{text:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(value.invalid(format!("{text:?} must be an http:// or https:// URL")));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(value.invalid(format!("{text:?} has no host")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Not echoed: the password is a secret.
        return Err(value.invalid("the URL must not contain a user name or password"));
    }
    if url.query().is_some() {
        return Err(value.invalid(format!("{text:?} must not have a query (?...)")));
    }
    if url.fragment().is_some() {
        return Err(value.invalid(format!("{text:?} must not have a fragment (#...)")));
    }
    Ok(url)
}

/// A whole number within `range`; the error quotes the text as given.
pub fn integer(value: &Sourced<String>, range: RangeInclusive<i64>) -> Result<i64, SettingsError> {
    let text = value.value.trim();
    let n: i64 = match text.parse() {
        Ok(n) => n,
        Err(_) if text.parse::<i128>().is_ok() => {
            return Err(value.invalid(format!("{text} is out of range {}", describe_range(&range))));
        }
        Err(_) if text.parse::<f64>().is_ok() => {
            return Err(value.invalid(format!("{text:?} is not a whole number")));
        }
        Err(_) => return Err(value.invalid(format!("{text:?} is not a number"))),
    };
    if !range.contains(&n) {
        return Err(value.invalid(format!("{n} is out of range {}", describe_range(&range))));
    }
    Ok(n)
}

/// A whole number within `range`, which must not go below zero.
pub fn unsigned(value: &Sourced<String>, range: RangeInclusive<i64>) -> Result<u64, SettingsError> {
    integer(value, range).map(|n| u64::try_from(n).unwrap_or(0))
}

fn describe_range(range: &RangeInclusive<i64>) -> String {
    if *range.end() == i64::MAX {
        format!("(the minimum is {})", range.start())
    } else {
        format!("{}..={}", range.start(), range.end())
    }
}

/// An image name or id, trimmed; empty is refused.
pub fn image(value: &Sourced<String>) -> Result<String, SettingsError> {
    let image = value.value.trim();
    if image.is_empty() {
        return Err(value.invalid("the image name is empty"));
    }
    Ok(image.to_owned())
}

/// A [`SettingsSource`] over plain maps, for tests and for callers that
/// assemble settings themselves.
#[derive(Clone, Debug, Default)]
pub struct MapSource {
    /// The environment variables.
    pub vars: std::collections::BTreeMap<String, String>,
    /// The file keys, with their origins.
    pub file: std::collections::BTreeMap<String, Sourced<String>>,
    /// The home directory, if any.
    pub home: Option<PathBuf>,
}

impl MapSource {
    /// A source holding only these environment variables.
    pub fn vars(pairs: &[(&str, &str)]) -> Self {
        Self {
            vars: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Self::default()
        }
    }
}

impl SettingsSource for MapSource {
    fn var(&self, name: &'static str) -> Option<Sourced<String>> {
        self.vars
            .get(name)
            .filter(|v| !v.is_empty())
            .map(|v| Sourced::new(v.clone(), Origin::Env(name)))
    }

    fn file_key(&self, key: &'static str) -> Option<Sourced<String>> {
        self.file.get(key).cloned()
    }

    fn home(&self) -> Option<PathBuf> {
        self.home.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_beats_the_file_and_empty_variables_are_unset() {
        let mut source = MapSource::vars(&[("A", "from env"), ("B", "")]);
        let file = |v: &str, key| {
            Sourced::new(v.to_owned(), Origin::file(Path::new("/g.toml"), key, None))
        };
        source.file.insert("a".into(), file("from file", "a"));
        source.file.insert("b".into(), file("from file", "b"));
        assert_eq!(source.get("A", "a").unwrap().value, "from env");
        let b = source.get("B", "b").unwrap();
        assert_eq!(b.value, "from file");
        assert_eq!(b.origin.to_string(), "b in /g.toml");
    }

    #[test]
    fn lists_read_with_or() {
        assert_eq!(or_list::<&str>(&[]), "");
        assert_eq!(or_list(&["host"]), "host");
        assert_eq!(or_list(&["host", "local", "modal"]), "host, local or modal");
    }

    #[test]
    fn errors_name_the_origin() {
        let v = Sourced::new("x".to_owned(), Origin::Env("SANDBOX_TIMEOUT_SECS"));
        assert_eq!(
            integer(&v, 0..=10).unwrap_err().to_string(),
            "invalid SANDBOX_TIMEOUT_SECS (environment): \"x\" is not a number"
        );
    }
}
