//! Files written into the sandbox: the bytes go on stdin to the `WRITE`
//! script of [`crate::scripts`], which sets the mode and renames the file
//! into place; paths outside Garrison's root are refused.

use anyhow::anyhow;
use sandbox::{Handle, Result, SandboxError};

use super::processes::HELPER_OUTPUT;
use super::{ModalBackend, root_of};
use crate::scripts;

pub(super) async fn put_file(
    backend: &ModalBackend,
    handle: &Handle,
    path: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<()> {
    if !scripts::inside(root_of(handle)?, path) {
        return Err(SandboxError::Fatal(anyhow!(
            "{path} is outside sandbox {}",
            handle.name
        )));
    }
    let argv = scripts::sh(
        scripts::WRITE,
        [path.to_owned(), format!("{:o}", mode & 0o7777)],
    );
    let finished = backend
        .run(handle, argv, None, Some(bytes), HELPER_OUTPUT)
        .await?;
    if finished.exit_code != 0 {
        return Err(SandboxError::Fatal(anyhow!(
            "writing {path} failed ({}): {}",
            finished.exit_code,
            finished.message()
        )));
    }
    Ok(())
}
