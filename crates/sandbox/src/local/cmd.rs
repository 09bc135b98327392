//! Running the host tools the local backend is built from.

use std::ffi::OsStr;
use std::process::Stdio;

use anyhow::{Context, bail};

/// Runs `program args extra`, failing with its stderr when it fails.
pub async fn run(program: &str, args: &[&str], extra: &[&OsStr]) -> anyhow::Result<()> {
    output(program, args, extra).await.map(drop)
}

/// Runs a tool and returns its stdout.
pub async fn output(program: &str, args: &[&str], extra: &[&OsStr]) -> anyhow::Result<Vec<u8>> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stderr: String = stderr.trim().chars().take(2000).collect();
        bail!("{program} failed ({}): {stderr}", out.status);
    }
    Ok(out.stdout)
}
