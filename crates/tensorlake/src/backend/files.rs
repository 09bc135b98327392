//! Files written into the sandbox. The files API takes bytes but no mode,
//! so a file is written beside its target and a helper process sets its mode
//! and renames it into place: a replaced binary is never seen half-written.
//! Paths outside Garrison's root, or with `.`/`..` in them, are refused.

use std::path::{Component, Path};

use anyhow::anyhow;
use sandbox::{Handle, Result, SandboxError};

use super::{TensorlakeBackend, map_err};

impl TensorlakeBackend {
    /// Maps a path as the sandbox sees it, refusing anything outside
    /// Garrison's root or with `.`/`..` in it.
    pub(super) fn inside(&self, handle: &Handle, path: &str) -> Result<String> {
        let root = self.root(&handle.id);
        let p = Path::new(path);
        let clean = p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        if !clean || !p.starts_with(&root) || p == Path::new(&root) {
            return Err(SandboxError::Fatal(anyhow!(
                "{path} is outside sandbox {}",
                handle.name
            )));
        }
        Ok(path.to_owned())
    }
}

pub(super) async fn put_file(
    backend: &TensorlakeBackend,
    handle: &Handle,
    path: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    let target = backend.inside(handle, path)?;
    let dp = backend.dataplane(handle).await?;
    let tmp = format!("{target}.garrison-{:08x}", rand::random::<u32>());
    dp.put_file(&tmp, bytes).await.map_err(map_err)?;
    let mode = format!("{:o}", mode & 0o7777);
    backend
        .run_ok(
            &dp,
            &[
                "/bin/sh",
                "-c",
                "chmod \"$1\" \"$2\" && mv -f \"$2\" \"$3\"",
                "sh",
                &mode,
                &tmp,
                &target,
            ],
        )
        .await
}
