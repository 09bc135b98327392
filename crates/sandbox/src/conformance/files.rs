//! Conformance checks on putting files and executables into a sandbox.

use anyhow::ensure;
use sha2::{Digest, Sha256};

use super::harness::Harness;
use crate::{Handle, ProcessStatus};

/// `put_file` writes a file with the mode asked for, runnable when it
/// is executable.
pub async fn put_file_writes_an_executable(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("files").await?;
    let path = format!("{}/tool", sandbox.bin_dir);
    h.backend
        .put_file(&sandbox, &path, b"#!/bin/sh\necho tool-ran \"$1\"\n", 0o755)
        .await?;
    // Overwriting is allowed and atomic.
    h.backend
        .put_file(
            &sandbox,
            &path,
            b"#!/bin/sh\necho tool-ran-2 \"$1\"\n",
            0o755,
        )
        .await?;
    let (status, output) = h.run(&sandbox, &format!("{path} arg")).await?;
    ensure!(
        status == ProcessStatus::Exited(0),
        "status {status:?} output {output:?}"
    );
    ensure!(output.trim() == "tool-ran-2 arg", "output {output:?}");
    let (_, mode) = h.run(&sandbox, &format!("stat -c %a {path}")).await?;
    ensure!(mode.trim() == "755", "mode {mode:?}");
    h.backend.destroy(&sandbox).await?;
    Ok(())
}

/// `put_executable` places a runnable copy of the bytes it is given.
pub async fn put_executable_places_a_runnable_copy(h: &Harness) -> anyhow::Result<()> {
    let script: &[u8] = b"#!/bin/sh\necho executable-ran \"$1\"\n";
    let sha256 = hex::encode(Sha256::digest(script));
    let tool = |sandbox: &Handle| format!("{}/tool", sandbox.bin_dir);
    let runs = async |sandbox: &Handle, expected: &str| -> anyhow::Result<()> {
        let (status, output) = h.run(sandbox, &format!("{} arg", tool(sandbox))).await?;
        ensure!(
            status == ProcessStatus::Exited(0) && output.trim() == expected,
            "in {}: status {status:?} output {output:?}, expected {expected:?}",
            sandbox.name
        );
        Ok(())
    };
    let a = h.create("exe-a").await?;
    let b = h.create("exe-b").await?;
    for sandbox in [&a, &b] {
        h.backend
            .put_executable(sandbox, &tool(sandbox), script, &sha256)
            .await?;
        runs(sandbox, "executable-ran arg").await?;
    }

    // Replacing one sandbox's copy leaves the other's alone.
    h.backend
        .put_file(&a, &tool(&a), b"#!/bin/sh\necho replaced\n", 0o755)
        .await?;
    runs(&a, "replaced").await?;
    runs(&b, "executable-ran arg").await?;
    // And it can be put again over a file of its own.
    h.backend
        .put_executable(&a, &tool(&a), script, &sha256)
        .await?;
    runs(&a, "executable-ran arg").await?;

    // A process changing its copy in place does not change what the next
    // sandbox gets.
    let (status, output) = h
        .run(
            &b,
            &format!(
                "chmod u+w {path} && printf tampered > {path} && cat {path}",
                path = tool(&b)
            ),
        )
        .await?;
    ensure!(
        status == ProcessStatus::Exited(0) && output.trim() == "tampered",
        "tampering in {}: status {status:?} output {output:?}",
        b.name
    );
    let c = h.create("exe-c").await?;
    h.backend
        .put_executable(&c, &tool(&c), script, &sha256)
        .await?;
    runs(&c, "executable-ran arg").await?;

    for sandbox in [&a, &b, &c] {
        h.backend.destroy(sandbox).await?;
    }
    Ok(())
}

/// `put_file` refuses paths outside the sandbox's filesystem.
pub async fn put_file_refuses_paths_outside(h: &Harness) -> anyhow::Result<()> {
    let sandbox = h.create("escape").await?;
    for bad in [
        format!("{}/../../../escape", sandbox.workdir),
        "relative/path".to_owned(),
    ] {
        ensure!(
            h.backend
                .put_file(&sandbox, &bad, b"x", 0o644)
                .await
                .is_err(),
            "{bad} was accepted"
        );
    }
    h.backend.destroy(&sandbox).await?;
    Ok(())
}
