//! The checks of each of Garrison's own values. Every error names the
//! value's origin; none quotes a secret.

use std::path::{Path, PathBuf};
use std::time::Duration;

pub(super) use common::settings::{http_url, image, integer};
use fleet::{Platform, Secret};
use sandbox::plugin::BackendPlugin;

use super::names::{self, Kind, Setting};
use common::settings::{Origin, SettingsError, Sourced};

use super::credentials::Credentials;
use super::resolved::DEFAULT_API_URL;

/// The backends Garrison was built with, in the order `--help` and errors
/// list them: the `garrison` crate's registry.
pub type Backends = [&'static dyn BackendPlugin];

/// The backend called `name`.
pub(super) fn find(backends: &Backends, name: &str) -> Option<&'static dyn BackendPlugin> {
    backends.iter().copied().find(|b| b.name() == name)
}

const RETENTION_EXAMPLES: &str = "e.g. \"30d\", \"12h\", \"90m\", \"3600s\" or \"unlimited\"";

pub(super) fn token(
    env: Option<&Sourced<Secret>>,
    credentials: Option<(&Path, &Credentials)>,
) -> Result<Secret, SettingsError> {
    let token = match (env, credentials) {
        (Some(t), _) => t.clone(),
        (None, Some((path, c))) => Sourced::new(
            c.token.clone(),
            Origin::Credentials {
                path: path.to_owned(),
                key: "token",
            },
        ),
        (None, None) => return Err(SettingsError::NoToken),
    };
    if token.value.is_empty() {
        return Err(SettingsError::NoToken);
    }
    // A token read with `$(cat file)` or pasted with a newline would break
    // the Authorization header later, with a far worse message. The value is
    // never echoed.
    if token
        .value
        .expose()
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(token.invalid("contains whitespace or control characters (value not shown)"));
    }
    Ok(token.value)
}

/// The API base, without a trailing slash (paths are appended to it).
pub(super) fn api_url(value: &Sourced<String>) -> Result<String, SettingsError> {
    let url = http_url(value)?;
    if url.path().trim_end_matches('/').ends_with("/opbeta") {
        return Err(value.invalid(format!(
            "{:?} ends in /opbeta: give the API base without it, e.g. {DEFAULT_API_URL}",
            value.value
        )));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `gateway_url`: the gateway a claim without one is served through, a
/// WebSocket URL as claims carry (`wss://`, or `ws://` for a local one).
pub(super) fn gateway_url(value: &str) -> Result<String, String> {
    let url = url::Url::parse(value).map_err(|e| format!("{value:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "ws" | "wss") || url.host_str().is_none() {
        return Err(format!(
            "{value:?} is not a ws:// or wss:// URL with a host, e.g. wss://gateway.example.com"
        ));
    }
    Ok(url.as_str().to_owned())
}

/// A directory URL: always ends with '/', so file names join onto it.
pub(super) fn static_base_url(value: &Sourced<String>) -> Result<String, SettingsError> {
    let mut url = http_url(value)?.as_str().to_owned();
    if !url.ends_with('/') {
        url.push('/');
    }
    Ok(url)
}

/// The protocol's acceptor id: 1-128 characters of `[A-Za-z0-9._-]`.
pub(super) fn acceptor_id(value: &Sourced<String>) -> Result<String, SettingsError> {
    let id = &value.value;
    if id.is_empty() || id.len() > 128 {
        return Err(value.invalid(format!("{id:?} must be 1 to 128 characters long")));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(value.invalid(format!(
            "{id:?} contains {c:?}: only letters, digits, '.', '_' and '-' are allowed"
        )));
    }
    Ok(id.clone())
}

/// Outpost ids are the fleet API's; only what can never be one is refused
/// (they go into query strings, log lines and comma-separated lists).
pub(super) fn outpost_id(value: &Sourced<String>) -> Result<(), SettingsError> {
    let id = &value.value;
    if id.is_empty() {
        return Err(value.invalid("the outpost id is empty"));
    }
    if id.len() > 256 {
        return Err(value.invalid(format!("outpost id {id:?} is longer than 256 characters")));
    }
    if id
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(value.invalid(format!(
            "outpost id {id:?} contains whitespace, a control character or a comma"
        )));
    }
    Ok(())
}

/// Where `snapshot_store` keeps snapshots.
pub(super) enum SnapshotStoreChoice {
    Dir(PathBuf),
    Object(url::Url),
}

/// A directory (a path or a `file://` URL) or an object-store URL
/// (`s3://`, `gs://`, `az://`) without credentials.
pub(super) fn snapshot_store(
    value: &Sourced<String>,
) -> Result<SnapshotStoreChoice, SettingsError> {
    let text = value.value.trim();
    if text.is_empty() {
        return Err(value.invalid("is empty"));
    }
    if !text.contains("://") {
        return Ok(SnapshotStoreChoice::Dir(PathBuf::from(text)));
    }
    let scheme = text.split("://").next().unwrap_or_default();
    // Parsed before it is ever shown: the URL may hold a password.
    let url = url::Url::parse(text)
        .map_err(|e| value.invalid(format!("a {scheme}:// URL that does not parse: {e}")))?;
    if url.scheme() == "file" {
        return url
            .to_file_path()
            .map(SnapshotStoreChoice::Dir)
            .map_err(|()| value.invalid("a file:// URL must name an absolute local path"));
    }
    sandbox::check_url(&url).map_err(|reason| value.invalid(reason))?;
    Ok(SnapshotStoreChoice::Object(url))
}

/// The snapshot key from `GARRISON_SNAPSHOT_KEY` or a file only its owner
/// may read (0600 or stricter), with where it came from.
pub(super) fn snapshot_key(
    env: Option<&Sourced<Secret>>,
    file: Option<&Sourced<PathBuf>>,
) -> Result<Option<(sandbox::SnapshotKey, Origin)>, SettingsError> {
    use sandbox::SnapshotKey;
    let (text, origin) = match (env, file) {
        (Some(env), Some(file)) => {
            return Err(env.invalid(format!("is set, and so is {}: give only one", file.origin)));
        }
        (Some(env), None) => (env.value.expose().to_owned(), env.origin.clone()),
        (None, Some(file)) => {
            let text = common::settings::read_owner_only(&file.value, 4096).map_err(|e| match e {
                SettingsError::InsecureCredentials { path, mode } => file.invalid(format!(
                    "{}: its mode {mode:04o} lets other users read or change it; run `chmod 600 {}`",
                    path.display(),
                    path.display()
                )),
                SettingsError::Read { path, error } => {
                    file.invalid(format!("cannot read {}: {error}", path.display()))
                }
                other => other,
            })?;
            (text, file.origin.clone())
        }
        (None, None) => return Ok(None),
    };
    let key = SnapshotKey::from_hex(&text).map_err(|reason| SettingsError::Invalid {
        origin: origin.clone(),
        reason: format!("{reason} (value not shown); e.g. `openssl rand -hex 32`"),
    })?;
    Ok(Some((key, origin)))
}

/// `fail` (the default: a snapshot that fails its integrity check fails
/// the session, and is kept) or `fresh` (the session starts from scratch).
pub(super) fn integrity_fallback(value: &Sourced<String>) -> Result<bool, SettingsError> {
    choice(value, names::SNAPSHOT_INTEGRITY_FALLBACK).map(|word| word == "fresh")
}

pub(super) fn directory(value: &Sourced<PathBuf>) -> Result<PathBuf, SettingsError> {
    if value.value.as_os_str().is_empty() {
        return Err(value.invalid("the path is empty"));
    }
    Ok(value.value.clone())
}

/// One of `known` by name, e.g. "unknown backend \"docker\" (expected host,
/// local, tensorlake or modal)".
pub(super) fn backend(
    value: &Sourced<String>,
    known: &Backends,
) -> Result<&'static str, SettingsError> {
    let name = value.value.trim();
    if let Some(plugin) = find(known, name) {
        return Ok(plugin.name());
    }
    let names: Vec<&str> = known.iter().map(|b| b.name()).collect();
    let expected = match names.as_slice() {
        [] => "none is built in".to_owned(),
        names => common::settings::or_list(names),
    };
    Err(value.invalid(format!("unknown backend {name:?} (expected {expected})")))
}

/// A whole number in the range [`names::ALL`] gives `setting`.
pub(super) fn ranged(value: &Sourced<String>, setting: Setting) -> Result<u64, SettingsError> {
    integer(value, setting.kind.int_range()).map(to_u64)
}

pub(super) fn max_concurrent(value: &Sourced<String>) -> Result<usize, SettingsError> {
    ranged(value, names::MAX_CONCURRENT).map(|n| n as usize)
}

pub(super) fn cpus(value: &Sourced<String>) -> Result<f64, SettingsError> {
    let Kind::Float { above, max } = names::CPUS.kind else {
        unreachable!("cpus is declared a number with a fraction")
    };
    let text = value.value.trim();
    let cpus: f64 = text
        .parse()
        .map_err(|_| value.invalid(format!("{text:?} is not a number")))?;
    // Written so that NaN fails too.
    if !(cpus > above && cpus <= max) {
        return Err(value.invalid(format!(
            "{text} is out of range: more than {above} and at most {max}"
        )));
    }
    Ok(cpus)
}

pub(super) fn memory_mb(value: &Sourced<String>) -> Result<u64, SettingsError> {
    ranged(value, names::MEMORY_MB)
}

pub(super) fn disk_mb(value: &Sourced<String>) -> Result<u64, SettingsError> {
    ranged(value, names::DISK_MB)
}

/// `true` or `false` (also `1` and `0`, as the backends' switches take).
pub(super) fn boolean(value: &Sourced<String>) -> Result<bool, SettingsError> {
    match value.value.trim() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(value.invalid(format!("{other:?} is not true or false"))),
    }
}

/// One of the words `setting` is declared with.
pub(super) fn choice(
    value: &Sourced<String>,
    setting: Setting,
) -> Result<&'static str, SettingsError> {
    let Kind::Choice(words) = setting.kind else {
        unreachable!("{} is not declared a choice", setting.name)
    };
    let text = value.value.trim();
    words.iter().copied().find(|w| *w == text).ok_or_else(|| {
        value.invalid(format!(
            "{text:?} is not {}",
            common::settings::or_list(words)
        ))
    })
}

/// A socket address such as `127.0.0.1:9180` or `[::1]:9180`.
pub(super) fn socket_addr(value: &Sourced<String>) -> Result<std::net::SocketAddr, SettingsError> {
    let text = value.value.trim();
    text.parse().map_err(|_| {
        value.invalid(format!(
            "{text:?} is not an address and port, e.g. 127.0.0.1:9180"
        ))
    })
}

pub(super) fn platform(value: &Sourced<String>) -> Result<Platform, SettingsError> {
    match Platform::from(value.value.trim()) {
        Platform::Unknown(other) => Err(value.invalid(format!(
            "unknown platform {other:?} (expected linux, macos or windows)"
        ))),
        known => Ok(known),
    }
}

/// Clone URLs (each item may hold several, comma-separated), checked as
/// [`crate::repos::plan`] will use them. An empty list clones nothing.
pub(super) fn repo_urls(value: &Sourced<Vec<String>>) -> Result<Vec<String>, SettingsError> {
    let mut urls: Vec<String> = Vec::new();
    for url in value
        .value
        .iter()
        .flat_map(|item| item.split(','))
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        let url = crate::repos::validate_url(url).map_err(|reason| value.invalid(reason))?;
        if urls.contains(&url) {
            return Err(value.invalid(format!("{url:?} is listed twice")));
        }
        urls.push(url);
    }
    crate::repos::plan(&urls).map_err(|reason| value.invalid(reason))?;
    Ok(urls)
}

pub(super) fn git_username(value: &Sourced<String>) -> Result<String, SettingsError> {
    let name = value.value.trim();
    if name.is_empty() {
        return Err(value.invalid("the user name is empty"));
    }
    // A newline would forge lines of git's credential protocol.
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(value.invalid("the user name contains whitespace or control characters"));
    }
    Ok(name.to_owned())
}

pub(super) fn git_token(value: &Sourced<Secret>) -> Result<Secret, SettingsError> {
    if value
        .value
        .expose()
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(value.invalid("contains whitespace or control characters (value not shown)"));
    }
    Ok(value.value.clone())
}

/// For numbers [`integer`] has already bounded below by zero or more.
pub(super) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// `"30d"`, `"12h"`, `"90m"`, `"3600s"`, or `"unlimited"` (keep forever:
/// `None`).
pub(super) fn parse_retention(text: &str) -> Result<Option<Duration>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if unit.is_empty() && !number.is_empty() {
        return Err(format!("{text:?} has no unit: {RETENTION_EXAMPLES}"));
    }
    let scale: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 24 * 3600,
        _ => return Err(format!("{text:?} is not a duration: {RETENTION_EXAMPLES}")),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: {RETENTION_EXAMPLES}"))?;
    if n == 0 {
        return Err(format!(
            "{text:?} would keep nothing: give a positive duration, or \"unlimited\" to keep snapshots forever"
        ));
    }
    n.checked_mul(scale)
        .map(|secs| Some(Duration::from_secs(secs)))
        .ok_or_else(|| format!("{text:?} is too long"))
}
