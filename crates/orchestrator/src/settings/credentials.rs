//! What `garrison connect` saves: the Devin token, the API it was issued
//! by and the outpost, in a file only its owner may read.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use common::settings::read_owner_only_if_present;
use fleet::Secret;
use serde::{Deserialize, Serialize};

use common::settings::SettingsError;

/// What `garrison connect` saves: `credentials.json`, mode 0600.
///
/// `api_url` and `outpost_id` are also the defaults for the API URL and the
/// outpost when no other layer sets them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The API base the token was issued by (without `/opbeta`).
    pub api_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The outpost `garrison connect` made.
    pub outpost_id: Option<String>,
    /// Serialized as a plain string; `Debug` shows `[redacted]`.
    pub token: Secret,
}

/// Reads the credentials file; `Ok(None)` if there is none.
///
/// Refuses a file whose mode grants any permission to group or others: a
/// token readable by other users must be fixed, not used.
pub fn load_credentials(path: &Path) -> Result<Option<Credentials>, SettingsError> {
    let Some(text) = read_owner_only_if_present(path, u64::MAX)? else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| SettingsError::Parse {
            path: path.to_owned(),
            reason: describe_json_error(&e),
        })
}

/// serde_json's messages may quote a value ("invalid type: integer `123`"),
/// and the value could be the token: only messages known to name keys are
/// passed through.
fn describe_json_error(error: &serde_json::Error) -> String {
    let (line, column) = (error.line(), error.column());
    let message = error.to_string();
    if message.starts_with("missing field") {
        // "missing field `token` at line 1 column 2"
        return message;
    }
    match error.classify() {
        serde_json::error::Category::Data => format!(
            "unexpected value at line {line} column {column}: expected {{\"api_url\": \"...\", \
             \"outpost_id\": \"...\", \"token\": \"...\"}}"
        ),
        _ => format!("not valid JSON (line {line} column {column})"),
    }
}

/// Writes the credentials file atomically: the parent directory is created
/// with mode 0700, the content goes to a temporary file created with mode
/// 0600 (never wider, not even for an instant), which is then renamed over
/// `path`.
pub fn save_credentials(path: &Path, credentials: &Credentials) -> Result<(), SettingsError> {
    let write_error = |error| SettingsError::Write {
        path: path.to_owned(),
        error,
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| write_error(io::Error::other("not a file path")))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(write_error)?;

    let mut json =
        serde_json::to_vec_pretty(credentials).map_err(|e| write_error(io::Error::other(e)))?;
    json.push(b'\n');

    let tmp = dir.join(format!(
        ".{}.{}.{:016x}.tmp",
        file_name.to_string_lossy(),
        std::process::id(),
        rand::random::<u64>()
    ));
    let written = (|| {
        // create_new: never write through a stale or planted file or symlink.
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&json)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(error) = written {
        let _ = fs::remove_file(&tmp);
        return Err(write_error(error));
    }
    // Make the rename itself durable; best effort, as not every filesystem
    // can sync a directory.
    if let Ok(dir) = fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}
