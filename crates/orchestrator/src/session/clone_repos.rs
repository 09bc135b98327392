//! The clone step of a start: the outpost's repositories into a sandbox
//! created fresh, before the remote starts (see [`crate::repos`]).

use std::sync::Arc;

use anyhow::anyhow;
use sandbox::Handle;
use serde_json::json;
use tracing::info;

use super::{SessionRunner, StartError, keep_claim_alive};
use crate::planner::Stage;
use crate::repos;

impl SessionRunner {
    /// Clones each repository in turn, keeping the claim alive meanwhile
    /// and not beginning a clone without the claim time a slow step needs.
    /// A failed clone fails the start (the planner retries it with a fresh
    /// sandbox, up to its limit, then releases the claim).
    pub(super) async fn clone_repos(&mut self, handle: &Handle) -> Result<(), StartError> {
        let config = Arc::new(self.deps.outpost.repos.clone());
        if config.urls.is_empty() {
            return Ok(());
        }
        if let Some(token) = &config.git_token {
            self.deps.logs.redactor().add(token.expose());
        }
        let planned = repos::plan(&config.urls).map_err(|e| StartError::Failed(anyhow!(e)))?;
        for (n, clone) in planned.into_iter().enumerate() {
            if !self.has_budget() {
                return Err(StartError::Deadline);
            }
            let started = std::time::Instant::now();
            let step = {
                let backend = self.deps.backend.clone();
                let logs = self.deps.logs.clone();
                let handle = handle.clone();
                let clone = clone.clone();
                let config = config.clone();
                let session_id = self.id().to_owned();
                async move {
                    repos::clone_one(&*backend, &handle, n, &clone, &config, &logs, &session_id)
                        .await
                }
            };
            let cloned = keep_claim_alive(
                self,
                step,
                SessionRunner::renewal_due_in,
                async |runner: &mut SessionRunner| runner.renew_in_step().await,
            )
            .await;
            self.check_renewals().map_err(StartError::Record)?;
            // A renewal meanwhile found the claim lost: the planner winds the
            // session down; nothing failed here.
            if matches!(self.rec.stage, Stage::Finishing(_) | Stage::Done(_)) {
                return Err(StartError::Deadline);
            }
            cloned.map_err(StartError::Failed)?;
            let ms = started.elapsed().as_millis() as u64;
            info!(
                session_id = self.id(),
                url = clone.url,
                dir = clone.dir,
                ms,
                "repository cloned"
            );
            self.event(
                "repo_cloned",
                json!({ "url": clone.url, "dir": clone.dir, "ms": ms }),
            );
        }
        Ok(())
    }
}
