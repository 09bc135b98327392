//! The environment file the systemd unit gives `garrison serve`
//! (`EnvironmentFile=-/etc/garrison/env`: `KEY=VALUE` lines, the token
//! among them), read by `garrison doctor` so that it checks what the
//! service will run with. Only as root, as systemd reads it, and only a
//! file root owns and no one else may read; values are never shown.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Its name in the configuration directory (`/etc/garrison` as root).
pub(super) const ENV_FILE_NAME: &str = "env";

/// More than any real environment file; a bigger one is not read.
const MAX_LEN: u64 = 256 * 1024;

/// What became of the environment file.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum EnvFile {
    /// Read: its variables (values may be secrets: `Debug` shows names
    /// only), and the numbers of lines that are not `KEY=VALUE`.
    Read {
        path: PathBuf,
        vars: BTreeMap<String, String>,
        bad_lines: Vec<usize>,
    },
    /// There is none (the unit starts without it too).
    Absent { path: PathBuf },
    /// Not read, and why (not root; a mode or owner that lets others
    /// change or read it; unreadable).
    Ignored { path: PathBuf, reason: String },
}

impl std::fmt::Debug for EnvFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read {
                path,
                vars,
                bad_lines,
            } => f
                .debug_struct("Read")
                .field("path", path)
                .field("names", &vars.keys().collect::<Vec<_>>())
                .field("bad_lines", bad_lines)
                .finish(),
            Self::Absent { path } => f.debug_struct("Absent").field("path", path).finish(),
            Self::Ignored { path, reason } => f
                .debug_struct("Ignored")
                .field("path", path)
                .field("reason", reason)
                .finish(),
        }
    }
}

/// Reads `path` if this process is root (`euid` 0) and the file is a
/// regular file owned by root with no permission for group or others.
pub(super) fn load_env_file(path: &Path, euid: u32) -> EnvFile {
    let ignored = |reason: String| EnvFile::Ignored {
        path: path.to_owned(),
        reason,
    };
    if euid != 0 {
        return ignored("only root reads it, as systemd does for the service".to_owned());
    }
    // No-follow and non-blocking: a link or a FIFO planted here is refused,
    // not followed or waited on.
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return EnvFile::Absent {
                path: path.to_owned(),
            };
        }
        Err(e) => return ignored(format!("cannot open it: {e}")),
    };
    let meta = match file.metadata() {
        Ok(meta) => meta,
        Err(e) => return ignored(format!("cannot stat it: {e}")),
    };
    if !meta.is_file() {
        return ignored("it is not a regular file".to_owned());
    }
    if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        return ignored(format!(
            "it is owned by uid {} with mode {:04o}; it holds secrets, so only a root-owned \
             file of mode 0600 is read (chown root:root {p}; chmod 600 {p})",
            meta.uid(),
            meta.mode() & 0o7777,
            p = path.display()
        ));
    }
    let mut text = String::new();
    if let Err(e) = file.take(MAX_LEN).read_to_string(&mut text) {
        return ignored(format!("cannot read it: {e}"));
    }
    let (vars, bad_lines) = parse(&text);
    EnvFile::Read {
        path: path.to_owned(),
        vars,
        bad_lines,
    }
}

/// `KEY=VALUE` lines as systemd reads them: blank lines and lines starting
/// with `#` or `;` are skipped, spaces around the key and value trimmed,
/// one pair of matching quotes removed. Returns the variables and the
/// numbers (1-based) of lines that are none of these.
pub(super) fn parse(text: &str) -> (BTreeMap<String, String>, Vec<usize>) {
    let mut vars = BTreeMap::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            bad.push(i + 1);
            continue;
        };
        let key = key.trim();
        let valid_key = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_key {
            bad.push(i + 1);
            continue;
        }
        vars.insert(key.to_owned(), unquote(value.trim()));
    }
    (vars, bad)
}

fn unquote(value: &str) -> String {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            let inner = &value[1..value.len() - 1];
            return if quote == '"' {
                inner.replace("\\\"", "\"").replace("\\\\", "\\")
            } else {
                inner.to_owned()
            };
        }
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn lines_are_read_as_systemd_reads_them() {
        let text = "# comment\n; also\n\nDEVIN_OUTPOSTS_TOKEN=cog_x\n  A = \"b c\" \nB='d'\n\
                    not a line\n1X=y\nEMPTY=\n";
        let (vars, bad) = parse(text);
        assert_eq!(vars["DEVIN_OUTPOSTS_TOKEN"], "cog_x");
        assert_eq!(vars["A"], "b c");
        assert_eq!(vars["B"], "d");
        assert_eq!(vars["EMPTY"], "");
        assert_eq!(bad, [7, 8]);
    }

    #[test]
    fn only_root_reads_only_a_private_root_owned_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ENV_FILE_NAME);
        assert!(matches!(load_env_file(&path, 0), EnvFile::Absent { .. }));
        fs::write(&path, "K=v\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            load_env_file(&path, 1000),
            EnvFile::Ignored { .. }
        ));
        let owner = fs::metadata(&path).unwrap().uid();
        match load_env_file(&path, 0) {
            EnvFile::Read { vars, .. } if owner == 0 => assert_eq!(vars["K"], "v"),
            EnvFile::Ignored { reason, .. } if owner != 0 => {
                assert!(reason.contains("owned by uid"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        match load_env_file(&path, 0) {
            EnvFile::Ignored { reason, .. } => {
                assert!(reason.contains("mode 0644"), "{reason}");
                assert!(!reason.contains("K=v"));
            }
            other => panic!("{other:?}"),
        }
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(load_env_file(&link, 0), EnvFile::Ignored { .. }));
    }
}
