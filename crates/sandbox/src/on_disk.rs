//! What the backends that keep each sandbox as a directory on this machine
//! (host, local) read back the same way: the recorded handles, for `list`,
//! and a process's output, in chunks.

use std::path::Path;

use crate::error::{Result, SandboxError};
use crate::names::SandboxName;
use crate::spec::{Handle, OutputChunk};

fn fatal(e: impl Into<anyhow::Error>) -> SandboxError {
    SandboxError::Fatal(e.into())
}

/// Every [`Handle`] recorded as `<dir>/<sandbox name>/<file>`, for
/// `list`: only directories named like Garrison's sandboxes count.
pub fn list_handles(dir: &Path, file: &str) -> Result<Vec<Handle>> {
    let mut handles = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(fatal)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if SandboxName::parse(&name).is_none() {
            continue;
        }
        if let Ok(bytes) = std::fs::read(entry.path().join(file))
            && let Ok(handle) = serde_json::from_slice::<Handle>(&bytes)
        {
            handles.push(handle);
        }
    }
    handles.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(handles)
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
