//! The read-only modes of `garrison deploy tensorlake` (`--status`,
//! `--logs`) and `--terminate`.

use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use sandbox::plugin::deploy::DeployOutput;

use super::lookup::{find, newest_uptime};
use super::plan;
use crate::Client;
use crate::dataplane::ProcessKey;
use crate::models::{ProcessState, SandboxStatus};

/// How often a suspended sandbox is looked at while following its logs.
const SUSPENDED_POLL: Duration = Duration::from_secs(2);

/// Reports the sandbox and the serve; whether serve runs.
pub(super) async fn status(
    client: &Client,
    name: &str,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<bool> {
    let Some(info) = find(client, name).await? else {
        out.say(&format!(
            "sandbox:  none named {name} (deploy with `garrison deploy tensorlake`)"
        ));
        return Ok(false);
    };
    out.say(&format!(
        "sandbox:  {name} (id {}): {}",
        info.sandbox_id, info.status
    ));
    if info.status != SandboxStatus::Running {
        out.say(&format!(
            "serve:    not looked at while the sandbox is {} (it is not woken; \
             `garrison deploy tensorlake` resumes it)",
            info.status
        ));
        return Ok(false);
    }
    let dp = client.sandbox(&info.sandbox_id, info.sandbox_url.as_deref())?;
    let processes = dp.list_processes().await?;
    match plan::newest_serve(&processes) {
        None => {
            out.say("serve:    not started");
            Ok(false)
        }
        Some(p) => {
            let name = p
                .managed
                .as_ref()
                .and_then(|m| m.name.clone())
                .unwrap_or_default();
            let running = p.status == ProcessState::Running;
            let how = match (&p.status, p.exit_code, p.signal) {
                (ProcessState::Running, _, _) => "running".to_owned(),
                (s, Some(code), _) => format!("{s} (code {code})"),
                (s, None, Some(sig)) => format!("{s} (signal {sig})"),
                (s, None, None) => s.to_string(),
            };
            let up = if running {
                newest_uptime(&processes).replace(", up", "; uptime")
            } else {
                String::new()
            };
            out.say(&format!("serve:    {name} (pid {}) {how}{up}", p.pid));
            Ok(running)
        }
    }
}

/// Deletes the sandbox, and the deployed serve with it.
pub(super) async fn terminate(
    client: &Client,
    name: &str,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<()> {
    let Some(info) = find(client, name).await? else {
        out.say(&format!("no sandbox named {name}; nothing to terminate"));
        return Ok(());
    };
    match client.delete_sandbox(&info.sandbox_id).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e).context(format!("deleting sandbox {name}")),
    }
    out.say(&format!(
        "terminated sandbox {name} (id {})",
        info.sandbox_id
    ));
    Ok(())
}

/// The serve process's output; with `follow`, new lines as they come,
/// waiting without waking it while the sandbox is suspended and going on
/// with the next serve process when one is started.
pub(super) async fn logs(
    client: &Client,
    name: &str,
    follow: bool,
    out: &mut dyn DeployOutput,
) -> anyhow::Result<()> {
    let mut current: Option<String> = None;
    let mut printed = 0usize;
    let mut said_waiting = false;
    let mut said_ended: Option<String> = None;
    loop {
        let Some(info) = find(client, name).await? else {
            if current.is_some() {
                out.note(&format!("sandbox {name} is gone"));
                return Ok(());
            }
            bail!("no sandbox named {name}");
        };
        if info.status != SandboxStatus::Running {
            if !follow {
                bail!(
                    "sandbox {name} is {}; its logs are read only while it runs \
                     (`garrison deploy tensorlake` resumes it)",
                    info.status
                );
            }
            if !said_waiting {
                out.note(&format!(
                    "sandbox {name} is {}; waiting for it to run again (it is not woken)",
                    info.status
                ));
                said_waiting = true;
            }
            tokio::time::sleep(SUSPENDED_POLL).await;
            continue;
        }
        said_waiting = false;
        let dp = client.sandbox(&info.sandbox_id, info.sandbox_url.as_deref())?;
        let processes = dp.list_processes().await?;
        let Some(newest) = plan::newest_serve(&processes) else {
            if !follow {
                bail!("garrison serve was never started in sandbox {name}");
            }
            tokio::time::sleep(SUSPENDED_POLL).await;
            continue;
        };
        let process = newest
            .managed
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        if current.as_deref() != Some(process.as_str()) {
            if current.is_some() {
                out.note(&format!("-- {process} --"));
            }
            current = Some(process.clone());
            printed = 0;
        }
        let key = ProcessKey::Name(process.clone());
        if !follow {
            for line in dp.output(&key).await?.lines {
                out.log_line(&line)?;
            }
            return Ok(());
        }
        // Everything so far, then new lines; what was printed before a
        // reconnect is skipped.
        let stream = match dp.follow_output(&key).await {
            Ok(stream) => stream,
            Err(_) => {
                tokio::time::sleep(SUSPENDED_POLL).await;
                continue;
            }
        };
        let mut stream = Box::pin(stream);
        let mut index = 0usize;
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { break };
            index += 1;
            if index > printed {
                out.log_line(&event.line)?;
                printed = index;
            }
        }
        // The stream ended: the process exited, or the sandbox went away or
        // to sleep. Look again.
        if let Ok(p) = dp.get_process(&key).await
            && p.status != ProcessState::Running
            && said_ended.as_deref() != Some(process.as_str())
        {
            said_ended = Some(process.clone());
            out.note(&format!(
                "{process} ended ({}); waiting for `garrison deploy tensorlake` to start another",
                p.status
            ));
        }
        tokio::time::sleep(SUSPENDED_POLL).await;
    }
}
