//! Finding the deployment's sandbox and its serve's uptime, for deploying
//! and for the read-only modes alike.

use anyhow::Context;
use sandbox::plugin::deploy::uptime;

use super::plan;
use crate::Client;
use crate::models::{ProcessInfo, SandboxInfo};
use common::now_ms;

/// The live sandbox of that name, if any.
pub(super) async fn find(client: &Client, name: &str) -> anyhow::Result<Option<SandboxInfo>> {
    client
        .find_by_name(name)
        .await
        .with_context(|| format!("looking up the Tensorlake sandbox {name}"))
}

/// `, up 4h 05m 06s` for the newest serve process, if it says when it
/// started.
pub(super) fn newest_uptime(processes: &[ProcessInfo]) -> String {
    plan::newest_serve(processes)
        .and_then(|p| p.started_at.as_ref()?.unix_ms())
        .map(|at| format!(", up {}", uptime(now_ms() - at)))
        .unwrap_or_default()
}
