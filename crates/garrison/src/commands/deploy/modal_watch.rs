//! The read-only modes of `garrison deploy modal` (`--status`, `--logs`)
//! and `--terminate`.

use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use modal::Client;

use super::modal_access::{
    LOG_CHUNK, find, now, read_log, serve_state, task_id, terminate_sandbox,
};
use super::modal_plan as plan;
use super::tensorlake_target::printable;

/// How often the log is looked at while following it.
const FOLLOW_POLL: Duration = Duration::from_secs(1);
/// Exit status of `--status` when serve is not running.
pub(super) const NOT_RUNNING: i32 = 3;

/// Prints the state; the exit status for the shell.
pub(super) async fn status(client: &Client, environment: &str, name: &str) -> anyhow::Result<i32> {
    let Some(found) = find(client, environment, name).await? else {
        println!("sandbox:  none named {name} running (deploy with `garrison deploy modal`)");
        return Ok(NOT_RUNNING);
    };
    let up = super::plan::uptime(((now() - found.created_at) * 1000.0) as i64);
    let left = super::plan::uptime(plan::seconds_left(&found, now()) as i64 * 1000);
    println!(
        "sandbox:  {name} (id {}): running; uptime {up}; {left} left of its lifetime \
         (the keep-alive creates the next one)",
        found.id
    );
    let Some(task) = task_id(client, &found.id).await? else {
        println!("serve:    the sandbox has just ended");
        return Ok(NOT_RUNNING);
    };
    let state = serve_state(client, &task).await?;
    println!(
        "serve:    {}",
        match state.as_str() {
            "running" => "running",
            "waiting" => "not started (the binary was not copied in)",
            "starting" => "starting",
            _ => "ended",
        }
    );
    Ok(if state == "running" { 0 } else { NOT_RUNNING })
}

pub(super) async fn terminate(
    client: &Client,
    environment: &str,
    name: &str,
) -> anyhow::Result<()> {
    match find(client, environment, name).await? {
        Some(found) => {
            terminate_sandbox(client, &found.id).await?;
            println!("terminated sandbox {name} (id {})", found.id);
        }
        None => println!("no sandbox named {name} running; nothing to terminate"),
    }
    let secret = plan::secret_name(name);
    let deleted = modal::secret::delete(client, &secret, environment)
        .await
        .map_err(|s| anyhow::anyhow!("deleting Modal Secret {secret}: {}", s.message()))?;
    if deleted {
        println!("deleted Modal Secret {secret}");
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
) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
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
                eprintln!(
                    "no sandbox named {name} running; waiting for the keep-alive to create one"
                );
                said_waiting = true;
            }
            tokio::time::sleep(FOLLOW_POLL * 2).await;
            continue;
        };
        said_waiting = false;
        if current.as_deref() != Some(found.id.as_str()) {
            if current.is_some() {
                eprintln!("-- sandbox {} --", found.id);
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
            write!(out, "{}", printable_text(&chunk))?;
            out.flush()?;
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

/// Log bytes without terminal control sequences, line ends kept.
fn printable_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .split_inclusive('\n')
        .map(|line| match line.strip_suffix('\n') {
            Some(body) => format!("{}\n", printable(body)),
            None => printable(line),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_text_keeps_line_ends_and_drops_control_sequences() {
        assert_eq!(
            printable_text(b"\x1b[2mdim\x1b[0m\nnext\tcol\r\npartial"),
            "?[2mdim?[0m\nnext\tcol?\npartial"
        );
    }
}
