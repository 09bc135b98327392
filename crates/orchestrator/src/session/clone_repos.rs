//! The clone step of a start: the outpost's repositories into a sandbox
//! created fresh, before the remote starts (see [`crate::repos`]). A
//! function of a [`StepCtx`] and the repositories to clone.

use std::sync::Arc;

use anyhow::anyhow;
use sandbox::Handle;
use serde_json::json;
use tracing::info;

use super::step::{KeepClaim, StartError, StepCtx, renewing};
use crate::repos;
use crate::settings::Repos;

/// Clones each repository in turn, keeping the claim alive meanwhile and
/// not beginning a clone without the claim time a slow step needs. A
/// failed clone fails the start (the planner retries it with a fresh
/// sandbox, up to its limit, then releases the claim).
pub(super) async fn clone_repos(
    ctx: &StepCtx,
    keeper: &mut impl KeepClaim,
    handle: &Handle,
    config: &Repos,
    mirrors: &Arc<repos::Mirrors>,
) -> Result<(), StartError> {
    let config = Arc::new(config.clone());
    if config.urls.is_empty() {
        return Ok(());
    }
    if let Some(token) = &config.git_token {
        ctx.logs.redactor().add(token.expose());
    }
    let planned = repos::plan(&config.urls).map_err(|e| StartError::Failed(anyhow!(e)))?;
    for (n, clone) in planned.into_iter().enumerate() {
        if !keeper.has_budget() {
            return Err(StartError::Deadline);
        }
        let started = std::time::Instant::now();
        let step = {
            let backend = ctx.backend.clone();
            let logs = ctx.logs.clone();
            let handle = handle.clone();
            let clone = clone.clone();
            let config = config.clone();
            let mirrors = mirrors.clone();
            let session_id = ctx.id().to_owned();
            async move {
                let into = repos::CloneInto {
                    backend: &*backend,
                    handle: &handle,
                    logs: &logs,
                    session_id: &session_id,
                };
                repos::clone_one(&into, n, &clone, &config, &mirrors).await
            }
        };
        let cloned = renewing(keeper, step).await;
        keeper.check_renewals().map_err(StartError::Record)?;
        // A renewal meanwhile found the claim lost: the planner winds the
        // session down; nothing failed here.
        if keeper.claim_lost() {
            return Err(StartError::Deadline);
        }
        let mirror = cloned.map_err(StartError::Failed)?.word();
        let ms = started.elapsed().as_millis() as u64;
        info!(
            session_id = ctx.id(),
            url = clone.url,
            dir = clone.dir,
            ms,
            mirror,
            "repository cloned"
        );
        ctx.event(
            "repo_cloned",
            json!({ "url": clone.url, "dir": clone.dir, "ms": ms, "mirror": mirror }),
        );
    }
    Ok(())
}
