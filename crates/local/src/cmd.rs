//! Running the host tools the local backend is built from.

use std::ffi::OsStr;

use anyhow::{Context, bail};

use sandbox::bounded_output;

/// Runs `program args extra`, failing with its stderr when it fails.
pub(crate) async fn run(program: &str, args: &[&str], extra: &[&OsStr]) -> anyhow::Result<()> {
    output(program, args, extra).await.map(drop)
}

/// Runs a tool and returns its stdout (bounded, as its stderr is: see
/// [`bounded_output`]).
pub(crate) async fn output(
    program: &str,
    args: &[&str],
    extra: &[&OsStr],
) -> anyhow::Result<Vec<u8>> {
    let out = bounded_output::output(tokio::process::Command::new(program).args(args).args(extra))
        .await
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!("{program} failed ({}): {}", out.status, out.stderr_text());
    }
    if out.stdout_cut > 0 {
        bail!(
            "{program} wrote more than {} bytes of output",
            bounded_output::STDOUT_MAX
        );
    }
    Ok(out.stdout)
}
