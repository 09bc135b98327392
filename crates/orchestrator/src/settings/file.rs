//! `garrison.toml`: Garrison's own keys, and the top-level keys each
//! backend's plug-in declared.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use common::settings::{Origin, SettingsError, Sourced};

use super::layer::{OutpostTable, RawSettings};
use super::names;
use super::validate::Backends;

/// Garrison's own keys of `garrison.toml`. Unknown keys are errors: a typo
/// such as `max_concurent` must not be silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    api_url: Option<String>,
    acceptor_id: Option<String>,
    static_base_url: Option<String>,
    backend: Option<String>,
    max_concurrent: Option<i64>,
    state_dir: Option<PathBuf>,
    snapshot_dir: Option<PathBuf>,
    snapshot_store: Option<String>,
    snapshot_key_file: Option<PathBuf>,
    snapshot_integrity_fallback: Option<String>,
    snapshot_retention: Option<String>,
    relist_interval_secs: Option<i64>,
    drain: Option<bool>,
    cpus: Option<f64>,
    memory_mb: Option<i64>,
    disk_mb: Option<i64>,
    image: Option<String>,
    max_restarts: Option<i64>,
    suspend_exit_grace_secs: Option<i64>,
    gateway_url: Option<String>,
    session_log_max_mb: Option<i64>,
    state_dir_min_free_mb: Option<i64>,
    repos: Option<Vec<String>>,
    git_username: Option<String>,
    log_format: Option<String>,
    listen: Option<String>,
    #[serde(default)]
    outpost: Vec<FileOutpost>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOutpost {
    id: String,
    backend: Option<String>,
    max_concurrent: Option<i64>,
    cpus: Option<f64>,
    memory_mb: Option<i64>,
    disk_mb: Option<i64>,
    image: Option<String>,
    platform: Option<String>,
    repos: Option<Vec<String>>,
}

/// Reads the TOML file at `path`; `Ok(None)` if it does not exist.
/// `backends` say which other top-level keys are theirs.
pub fn load_file(path: &Path, backends: &Backends) -> Result<Option<RawSettings>, SettingsError> {
    match fs::read_to_string(path) {
        Ok(text) => parse_file(path, &text, backends).map(Some),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(SettingsError::Read {
            path: path.to_owned(),
            error,
        }),
    }
}

/// Parses the TOML file's text; `path` is only used to name origins. The
/// keys `backends` declared are set aside for them; any other key must be
/// Garrison's own.
pub fn parse_file(
    path: &Path,
    text: &str,
    backends: &Backends,
) -> Result<RawSettings, SettingsError> {
    let parse_error = |e: toml::de::Error| SettingsError::Parse {
        path: path.to_owned(),
        reason: describe_toml_error(text, &e),
    };
    let mut table = DeTable::parse(text).map_err(parse_error)?;
    let backend_keys = take_backend_keys(path, text, table.get_mut(), backends)?;
    check_keys(table.get_ref(), text, backends).map_err(|reason| SettingsError::Parse {
        path: path.to_owned(),
        reason,
    })?;
    // Deserialized from the parsed table, whose values keep their spans, so
    // errors still point at a line and column.
    let file =
        FileSettings::deserialize(toml::de::Deserializer::from(table)).map_err(parse_error)?;

    let at = |key: &'static str, outpost: Option<&str>| Origin::file(path, key, outpost);
    // Numbers become text, as in the other layers, so that one validation
    // path reports every range error with its origin.
    let text_of = |value: Option<String>, key, outpost: Option<&str>| {
        value.map(|v| Sourced::new(v, at(key, outpost)))
    };
    let num = |value: Option<i64>, key, outpost: Option<&str>| {
        value.map(|v| Sourced::new(v.to_string(), at(key, outpost)))
    };
    let float = |value: Option<f64>, key, outpost: Option<&str>| {
        value.map(|v| Sourced::new(v.to_string(), at(key, outpost)))
    };
    let dir = |value: Option<PathBuf>, key| value.map(|v| Sourced::new(v, at(key, None)));

    let outpost_tables = file
        .outpost
        .into_iter()
        .map(|t| {
            let id = Some(t.id.as_str());
            OutpostTable {
                backend: text_of(t.backend, "backend", id),
                max_concurrent: num(t.max_concurrent, "max_concurrent", id),
                cpus: float(t.cpus, "cpus", id),
                memory_mb: num(t.memory_mb, "memory_mb", id),
                disk_mb: num(t.disk_mb, "disk_mb", id),
                image: text_of(t.image, "image", id),
                platform: text_of(t.platform, "platform", id),
                repos: t.repos.map(|r| Sourced::new(r, at("repos", id))),
                id: Sourced::new(t.id.clone(), at("id", id)),
            }
        })
        .collect();

    Ok(RawSettings {
        outposts: None,
        api_url: text_of(file.api_url, "api_url", None),
        acceptor_id: text_of(file.acceptor_id, "acceptor_id", None),
        static_base_url: text_of(file.static_base_url, "static_base_url", None),
        backend: text_of(file.backend, "backend", None),
        max_concurrent: num(file.max_concurrent, "max_concurrent", None),
        state_dir: dir(file.state_dir, "state_dir"),
        snapshot_dir: dir(file.snapshot_dir, "snapshot_dir"),
        snapshot_store: text_of(file.snapshot_store, "snapshot_store", None),
        snapshot_key_file: dir(file.snapshot_key_file, "snapshot_key_file"),
        snapshot_key: None,
        snapshot_integrity_fallback: text_of(
            file.snapshot_integrity_fallback,
            "snapshot_integrity_fallback",
            None,
        ),
        snapshot_retention: text_of(file.snapshot_retention, "snapshot_retention", None),
        relist_interval_secs: num(file.relist_interval_secs, "relist_interval_secs", None),
        drain: file
            .drain
            .map(|d| Sourced::new(d.to_string(), at("drain", None))),
        cpus: float(file.cpus, "cpus", None),
        memory_mb: num(file.memory_mb, "memory_mb", None),
        disk_mb: num(file.disk_mb, "disk_mb", None),
        image: text_of(file.image, "image", None),
        max_restarts: num(file.max_restarts, "max_restarts", None),
        suspend_exit_grace_secs: num(
            file.suspend_exit_grace_secs,
            "suspend_exit_grace_secs",
            None,
        ),
        gateway_url: text_of(file.gateway_url, "gateway_url", None),
        session_log_max_mb: num(file.session_log_max_mb, "session_log_max_mb", None),
        state_dir_min_free_mb: num(file.state_dir_min_free_mb, "state_dir_min_free_mb", None),
        token: None,
        repos: file.repos.map(|r| Sourced::new(r, at("repos", None))),
        git_username: text_of(file.git_username, "git_username", None),
        git_token: None,
        log_format: text_of(file.log_format, "log_format", None),
        listen: text_of(file.listen, "listen", None),
        backend_keys,
        outpost_tables,
        backend_flags: BTreeMap::new(),
    })
}

/// Removes the top-level keys some backend declared from `table` and
/// returns their values as text (numbers too, as in the other layers).
fn take_backend_keys(
    path: &Path,
    text: &str,
    table: &mut DeTable<'_>,
    backends: &Backends,
) -> Result<BTreeMap<&'static str, Sourced<String>>, SettingsError> {
    let mut taken = BTreeMap::new();
    for key in backends.iter().flat_map(|b| b.file_keys()) {
        let Some(value) = table.remove(*key) else {
            continue;
        };
        let as_text = match value.get_ref() {
            DeValue::String(s) => Some(s.to_string()),
            DeValue::Integer(n) => i64::from_str_radix(n.as_str(), n.radix())
                .ok()
                .map(|n| n.to_string()),
            DeValue::Float(f) => Some(f.as_str().to_owned()),
            DeValue::Boolean(b) => Some(b.to_string()),
            // A list: its strings joined with commas, as a flag or a
            // variable would give it.
            DeValue::Array(items) => items
                .iter()
                .map(|item| match item.get_ref() {
                    DeValue::String(s) => Some(s.to_string()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .map(|items| items.join(",")),
            _ => None,
        };
        let Some(as_text) = as_text else {
            let (line, column) = line_and_column(text, value.span().start);
            return Err(SettingsError::Parse {
                path: path.to_owned(),
                reason: format!(
                    "line {line}, column {column}: {key} must be a string, a number or a list of strings"
                ),
            });
        };
        taken.insert(*key, Sourced::new(as_text, Origin::file(path, key, None)));
    }
    Ok(taken)
}

/// Refuses any key that is neither Garrison's ([`names::ALL`]) nor a
/// backend's, at the top level and in `[[outpost]]` tables, with the list
/// of the keys that are accepted there. (Checked here rather than by
/// serde, whose list would leave out the backends' keys.)
fn check_keys(table: &DeTable<'_>, text: &str, backends: &Backends) -> Result<(), String> {
    let backend_keys = || backends.iter().flat_map(|b| b.file_keys()).copied();
    let unknown =
        |key: &toml::Spanned<std::borrow::Cow<'_, str>>, valid: Vec<&str>, place: &str| {
            let (line, column) = line_and_column(text, key.span().start);
            let mut reason = format!(
                "line {line}, column {column}: unknown key `{}`{place}",
                &**key.get_ref()
            );
            if let Some(hint) = refused_key_hint(key.get_ref(), backends) {
                reason.push_str(&format!(" ({hint})"));
            }
            reason.push_str(&format!("; valid keys are {}", valid.join(", ")));
            reason
        };
    for (key, value) in table {
        let name: &str = key.get_ref();
        if name == "outpost" {
            let DeValue::Array(tables) = value.get_ref() else {
                continue; // serde reports the type
            };
            for outpost in tables {
                let DeValue::Table(outpost) = outpost.get_ref() else {
                    continue;
                };
                for (key, _) in outpost {
                    let name: &str = key.get_ref();
                    if !names::outpost_keys().any(|k| k == name) {
                        return Err(unknown(
                            key,
                            names::outpost_keys().collect(),
                            " in an [[outpost]] table",
                        ));
                    }
                }
            }
            continue;
        }
        let known = names::file_keys().chain(backend_keys()).any(|k| k == name);
        if !known {
            let mut valid: Vec<&str> = names::file_keys().chain(backend_keys()).collect();
            valid.push("[[outpost]]");
            return Err(unknown(key, valid, ""));
        }
    }
    Ok(())
}

/// Why a key that holds a secret is never read from the file.
fn refused_key_hint(key: &str, backends: &Backends) -> Option<String> {
    if let Some(secret) = names::ALL.iter().find(|s| s.secret && s.name == key) {
        let also = if secret.name == names::TOKEN.name {
            " or the credentials file"
        } else {
            ""
        };
        return Some(format!(
            "{} is read from {} in the environment{also}, never from this file",
            secret.name,
            secret.env.unwrap_or("the environment")
        ));
    }
    backends
        .iter()
        .flat_map(|b| b.refused_file_keys())
        .find(|(k, _)| *k == key)
        .map(|(_, instead)| (*instead).to_owned())
}

/// 1-based line and column of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// "line L, column C: message". Built from the parts rather than the
/// error's `Display`, which quotes the offending source line: if someone
/// pasted a token into the file, that line would carry it into a log.
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let reason = error.message().trim().to_owned();
    match error.span() {
        Some(span) => {
            let (line, column) = line_and_column(text, span.start);
            format!("line {line}, column {column}: {reason}")
        }
        None => reason,
    }
}
