//! Bringing a session's sandbox up to the point its remote can start: the
//! remote binary resolved for the backend's architecture, a sandbox for
//! the session (see `provision.rs`), the verified binary put in, the
//! repositories cloned into a fresh workspace (see `clone_repos.rs`). A
//! function of a [`StepCtx`] and explicit inputs; what must be written down
//! before the next step goes through [`StartRecords`], and what it made is
//! returned for the runner to record. The remote itself is started by
//! `launch.rs`.

use fleet::QueueEntry;

use super::clone_repos::clone_repos;
use super::provision::{ProvisionInput, Provisioned, provision};
use super::step::{KeepClaim, RecordFailed, StartError, StepCtx};
use crate::contract;
use crate::metrics::Metrics;
use crate::remote::{RemoteResolver, ResolveError};
use crate::settings::Repos;

/// What [`prepare`] takes from the session and its outpost.
pub(super) struct StartInput<'a> {
    /// The entry as claimed (its pinned SHA, its network policy).
    pub(super) entry: &'a QueueEntry,
    /// Where the remote binary comes from, verified.
    pub(super) resolver: &'a RemoteResolver,
    /// The outpost's repositories, cloned into a fresh workspace.
    pub(super) repos: &'a Repos,
    /// The host's mirrors of repositories, cloned from.
    pub(super) mirrors: &'a std::sync::Arc<crate::repos::Mirrors>,
    /// What provisioning the sandbox needs.
    pub(super) provision: ProvisionInput<'a>,
}

/// A sandbox ready for its remote.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Ready {
    /// Where the repositories were cloned, when they were (a fresh
    /// workspace): the remote starts there. `None` for a workspace resumed
    /// or restored, whose layout the launch probes.
    pub(super) cloned_into: Option<String>,
}

/// What a start writes down before going on, each time before the step it
/// records (the runner implements it, as it does [`KeepClaim`]).
pub(super) trait StartRecords: KeepClaim {
    /// The remote build the start uses (kept with the next record).
    fn resolved(&mut self, remote_sha: &str);
    /// The start begins (the session is `starting`), before any sandbox is
    /// made for it: nothing is made when this fails.
    fn starting(&mut self) -> Result<(), RecordFailed>;
    /// The sandbox the start uses, before anything is put in it.
    fn sandbox_made(&mut self, provisioned: &Provisioned) -> Result<(), RecordFailed>;
}

/// Resolves the binary, provisions the sandbox and puts the binary and the
/// repositories in, renewing the claim through `host` while slow steps
/// run. [`StartError::Deadline`] when too little claim time is left to go
/// on (or a renewal found the claim lost); nothing failed then.
pub(super) async fn prepare(
    ctx: &StepCtx,
    host: &mut impl StartRecords,
    input: StartInput<'_>,
) -> Result<Ready, StartError> {
    let pinned = input.entry.spec.remote_binary_sha.clone();
    let remote = match input
        .resolver
        .resolve(pinned.as_deref(), ctx.backend.capabilities().arch)
        .await
    {
        Ok(remote) => remote,
        Err(e) => {
            if e.is_checksum_mismatch() {
                Metrics::inc(&ctx.metrics.checksum_refusals);
            }
            return Err(unverified(e));
        }
    };
    host.resolved(&remote.sha);
    if !host.has_budget() {
        return Err(StartError::Deadline);
    }
    host.starting().map_err(StartError::Record)?;

    let provisioned = provision(ctx, host, input.provision).await?;
    host.sandbox_made(&provisioned)
        .map_err(StartError::Record)?;
    host.check_renewals().map_err(StartError::Record)?;
    // A renewal while the sandbox was made found the claim lost: the
    // planner winds the session down (the sandbox is recorded).
    if host.claim_lost() {
        return Err(StartError::Deadline);
    }
    let handle = provisioned.handle;

    let bytes = input
        .resolver
        .verified_bytes(&remote)
        .await
        .map_err(unverified)?;
    let path = format!("{}/{}", handle.bin_dir, contract::REMOTE_BINARY);
    // Named by its verified digest, so a backend that can share one stored
    // copy among its sandboxes (the host backend links it) does not write
    // the binary once per session.
    ctx.backend
        .put_executable(&handle, &path, &bytes, &remote.sha256)
        .await
        .map_err(|e| StartError::Failed(e.into()))?;
    // A restored or resumed workspace has its repositories already.
    if provisioned.keeps_workspace {
        return Ok(Ready { cloned_into: None });
    }
    clone_repos(ctx, host, &handle, input.repos, input.mirrors).await?;
    Ok(Ready {
        cloned_into: Some(handle.workdir.clone()),
    })
}

/// A binary that could not be had: one that failed verification is
/// refused (the session must not start), anything else is tried again.
fn unverified(e: ResolveError) -> StartError {
    if e.is_checksum_mismatch() {
        StartError::Refused(e.to_string())
    } else {
        StartError::Failed(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_that_fails_verification_is_refused_and_anything_else_retried() {
        let mismatch = ResolveError::ChecksumMismatch {
            sha: "abc".into(),
            expected: "00".into(),
            actual: "11".into(),
        };
        let message = mismatch.to_string();
        assert!(matches!(unverified(mismatch), StartError::Refused(m) if m == message));
        for passing in [
            ResolveError::NotFound("abc".into()),
            ResolveError::Invalid("x".into()),
            ResolveError::Transient(anyhow::anyhow!("reset")),
            ResolveError::Cache(anyhow::anyhow!("disk")),
        ] {
            assert!(matches!(unverified(passing), StartError::Failed(_)));
        }
    }
}
