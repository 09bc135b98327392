//! The read-only modes of `garrison deploy modal` (`--status`, `--logs`)
//! and `--terminate`.

use std::time::Duration;

use anyhow::bail;
use sandbox::plugin::deploy::{DeployOutput, uptime};

use super::access::{LOG_CHUNK, find, now, read_log, serve_state, task_id, terminate_sandbox};
use super::plan;
use crate::Client;

/// How often the log is looked at while following it.
const FOLLOW_POLL: Duration = Duration::from_secs(1);
/// Reports the sandbox and the serve; whether serve runs.
pub(super) async fn status(
    client: &Client,
    environment: &str,
    name: &str,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<bool> {
    let Some(found) = find(client, environment, name).await? else {
        out.say(&format!(
            "sandbox:  none named {name} running (deploy with `garrison deploy modal`)"
        ));
        return Ok(false);
    };
    let up = uptime(((now() - found.created_at) * 1000.0) as i64);
    let left = uptime(plan::seconds_left(&found, now()) as i64 * 1000);
    out.say(&format!(
        "sandbox:  {name} (id {}): running; uptime {up}; {left} left of its lifetime \
         (the keep-alive creates the next one)",
        found.id
    ));
    let Some(task) = task_id(client, &found.id).await? else {
        out.say("serve:    the sandbox has just ended");
        return Ok(false);
    };
    let state = serve_state(client, &task).await?;
    out.say(&format!(
        "serve:    {}",
        match state.as_str() {
            "running" => "running",
            "waiting" => "not started (the binary was not copied in)",
            "starting" => "starting",
            _ => "ended",
        }
    ));
    Ok(state == "running")
}

/// Ends the sandbox and deletes the Secret.
pub(super) async fn terminate(
    client: &Client,
    environment: &str,
    name: &str,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<()> {
    match find(client, environment, name).await? {
        Some(found) => {
            terminate_sandbox(client, &found.id).await?;
            out.say(&format!("terminated sandbox {name} (id {})", found.id));
        }
        None => out.say(&format!(
            "no sandbox named {name} running; nothing to terminate"
        )),
    }
    let secret = plan::secret_name(name);
    let deleted = crate::secret::delete(client, &secret, environment)
        .await
        .map_err(|s| anyhow::anyhow!("deleting Modal Secret {secret}: {}", s.message()))?;
    if deleted {
        out.say(&format!("deleted Modal Secret {secret}"));
    }
    Ok(())
}

/// The serve's log; with `follow`, new output as it comes, going on with
/// the next sandbox when the keep-alive creates one.
pub(super) async fn logs(
    client: &Client,
    environment: &str,
    name: &str,
    follow: bool,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<()> {
    let mut current: Option<String> = None;
    let mut offset = 0u64;
    let mut said_waiting = false;
    loop {
        let found = find(client, environment, name).await?;
        let task = match &found {
            Some(found) => task_id(client, &found.id).await?,
            None => None,
        };
        let (Some(found), Some(task)) = (found, task) else {
            if !follow {
                bail!("no sandbox named {name} running");
            }
            if !said_waiting {
                out.note(&format!(
                    "no sandbox named {name} running; waiting for the keep-alive to create one"
                ));
                said_waiting = true;
            }
            tokio::time::sleep(FOLLOW_POLL * 2).await;
            continue;
        };
        said_waiting = false;
        if current.as_deref() != Some(found.id.as_str()) {
            if current.is_some() {
                out.note(&format!("-- sandbox {} --", found.id));
            }
            current = Some(found.id.clone());
            offset = 0;
        }
        let chunk = match read_log(client, &task, offset).await {
            Ok(chunk) => chunk,
            // The sandbox ended meanwhile: look again.
            Err(_) if follow => {
                tokio::time::sleep(FOLLOW_POLL).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        offset += chunk.len() as u64;
        if !chunk.is_empty() {
            out.log_text(&chunk)?;
            if chunk.len() == LOG_CHUNK {
                continue;
            }
        }
        if !follow {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}
