//! What the backends that keep each sandbox as a directory on this machine
//! (host, local) read back the same way: the recorded handles, for `list`,
//! and a process's output, in chunks.

use std::path::Path;

use crate::error::{Result, SandboxError};
use crate::format::SANDBOX_HANDLE;
use crate::names::SandboxName;
use crate::spec::{Handle, OutputChunk};

fn fatal(e: impl Into<anyhow::Error>) -> SandboxError {
    SandboxError::Fatal(e.into())
}

/// Every [`Handle`] recorded as `<dir>/<sandbox name>/<file>`, for
/// `list`: only directories named like Garrison's sandboxes count. One a
/// newer Garrison wrote fails the listing (see [`crate::format`]).
pub fn list_handles(dir: &Path, file: &str) -> Result<Vec<Handle>> {
    let mut handles = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(fatal)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if SandboxName::parse(&name).is_none() {
            continue;
        }
        let path = entry.path().join(file);
        if let Ok(bytes) = std::fs::read(&path)
            && let Some(handle) = read_handle(&path, &bytes)?
        {
            handles.push(handle);
        }
    }
    handles.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(handles)
}

/// The handle in `bytes` (read from `path`): `None` when they do not parse
/// (no sandbox), an error when a newer Garrison wrote them.
pub fn read_handle(path: &Path, bytes: &[u8]) -> Result<Option<Handle>> {
    SANDBOX_HANDLE.check(path, bytes).map_err(fatal)?;
    Ok(serde_json::from_slice::<Handle>(bytes).ok())
}

/// Reads up to `max` bytes of `file` from `offset`.
pub fn read_chunk(mut file: std::fs::File, offset: u64, max: usize) -> Result<OutputChunk> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset)).map_err(fatal)?;
    let mut data = Vec::new();
    file.take(max as u64)
        .read_to_end(&mut data)
        .map_err(fatal)?;
    let next_offset = offset + data.len() as u64;
    Ok(OutputChunk { data, next_offset })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_without_a_format_are_listed_and_newer_ones_refused() {
        let name = SandboxName::for_session("s");
        // As releases before formats wrote it.
        let todays = format!(
            r#"{{"backend":"host","id":"{name}","name":"{name}","labels":{{}},"workdir":"/w","state_dir":"/s","bin_dir":"/b","home":"/h"}}"#
        );
        let dir = tempfile::tempdir().unwrap();
        let sandbox = dir.path().join(name.as_str());
        std::fs::create_dir(&sandbox).unwrap();
        let path = sandbox.join("handle.json");
        std::fs::write(&path, &todays).unwrap();
        let listed = list_handles(dir.path(), "handle.json").unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, name.as_str());

        let newer = todays.replacen('{', r#"{"format":999,"#, 1);
        std::fs::write(&path, &newer).unwrap();
        let err = list_handles(dir.path(), "handle.json").unwrap_err();
        let message = format!("{err:#}");
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("a newer Garrison wrote it"), "{message}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), newer);
    }
}
