//! One session: dial, say hello, then run what the gateway sends, one
//! message at a time, until it says the session slept or ended.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use gateway_proto::{GatewayMessage, RemoteMessage};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::config::Config;
use crate::dial::{self, DialError, Socket};
use crate::exit::Outcome;
use crate::state::StateDir;
use crate::steps::{self, StepResult};

/// How long to wait for the gateway to acknowledge our close before
/// leaving anyway; the session is over either way.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

pub(crate) async fn serve(config: Config) -> Outcome {
    let mut state = match StateDir::open(&config.state_dir, &config.session_id) {
        Ok(state) => state,
        Err(err) => {
            eprintln!(
                "devin-remote-sim: cannot use state dir {}: {err}",
                config.state_dir.display()
            );
            return Outcome::Usage;
        }
    };

    let mut socket = match dial::dial(&config).await {
        Ok(socket) => socket,
        Err(DialError::Refused(status)) => {
            eprintln!("devin-remote-sim: the gateway refused the connection: HTTP {status}");
            return Outcome::Refused;
        }
        Err(DialError::Unreachable(why)) => {
            eprintln!(
                "devin-remote-sim: gateway unreachable after {}s: {why}",
                config.connect_budget.as_secs()
            );
            return Outcome::Unreachable;
        }
    };
    if let Err(err) = state.record_connection() {
        eprintln!("devin-remote-sim: cannot update state: {err}");
    }
    eprintln!(
        "devin-remote-sim: connected to {}:{} for session {}",
        config.gateway.host, config.gateway.port, config.session_id
    );

    let hello = RemoteMessage::Hello {
        session_id: config.session_id.clone(),
        cwd: std::env::current_dir()
            .map(|dir| dir.display().to_string())
            .unwrap_or_default(),
        pid: std::process::id(),
        version: crate::VERSION.to_string(),
    };
    if let Err(err) = send(&mut socket, &hello).await {
        eprintln!("devin-remote-sim: connection lost: {err}");
        return Outcome::Lost;
    }

    // A message that arrived while a command ran, handled next.
    let mut early: Option<String> = None;
    loop {
        let text = match early.take() {
            Some(text) => text,
            None => match next_text(&mut socket).await {
                Ok(text) => text,
                Err(outcome) => return outcome,
            },
        };
        let message: GatewayMessage = match serde_json::from_str(&text) {
            Ok(message) => message,
            Err(err) => {
                // Replying nothing would leave the gateway waiting forever;
                // failing loudly is the honest answer to a protocol mismatch.
                eprintln!("devin-remote-sim: unreadable message from the gateway: {err}");
                return Outcome::Lost;
            }
        };
        match message {
            GatewayMessage::Exec { id, command } => {
                let result = match exec_watching(&mut socket, &command).await {
                    Ok((result, next)) => {
                        early = next;
                        result
                    }
                    Err(outcome) => return outcome,
                };
                record(
                    &mut state,
                    json!({"step": "exec", "id": id, "command": command,
                           "exit_code": result.exit_code, "truncated": result.truncated}),
                );
                if !reply(&mut socket, id, result).await {
                    return Outcome::Lost;
                }
            }
            GatewayMessage::WriteFile { id, path, content } => {
                let result = steps::write_file(&path, &content).await;
                record(
                    &mut state,
                    json!({"step": "write_file", "id": id, "path": path,
                           "bytes": content.len(), "exit_code": result.exit_code}),
                );
                if !reply(&mut socket, id, result).await {
                    return Outcome::Lost;
                }
            }
            GatewayMessage::Crash { id, code } => {
                record(&mut state, json!({"step": "crash", "id": id, "code": code}));
                eprintln!("devin-remote-sim: crashing with exit code {code} as asked");
                // No reply, no close frame: exactly what a crash looks like.
                std::process::exit(code);
            }
            GatewayMessage::Sleep | GatewayMessage::End => {
                let step = if message == GatewayMessage::Sleep {
                    "sleep"
                } else {
                    "end"
                };
                record(&mut state, json!({"step": step}));
                eprintln!("devin-remote-sim: session {step}; exiting");
                let _ = socket.close(None).await;
                finish_close(&mut socket).await;
                return Outcome::Clean;
            }
        }
    }
}

/// The next protocol message. Pings are answered by tungstenite while we
/// read; nothing else but text is part of the protocol. A closed or broken
/// connection ends the session as [`Outcome::Lost`].
async fn next_text(socket: &mut Socket) -> Result<String, Outcome> {
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(text))) => return Ok(text.to_string()),
            Some(Ok(
                Message::Ping(_) | Message::Pong(_) | Message::Binary(_) | Message::Frame(_),
            )) => continue,
            Some(Ok(Message::Close(_))) | None => {
                eprintln!(
                    "devin-remote-sim: the gateway closed the connection before the session slept or ended"
                );
                finish_close(socket).await;
                return Err(Outcome::Lost);
            }
            Some(Err(err)) => {
                eprintln!("devin-remote-sim: connection lost: {err}");
                return Err(Outcome::Lost);
            }
        }
    }
}

/// Runs a command while still reading the socket, so pings are answered
/// during long commands and a lost connection ends the session at once
/// (dropping the step kills its shell) instead of after the command. A
/// message that arrives meanwhile is kept for the main loop.
async fn exec_watching(
    socket: &mut Socket,
    command: &str,
) -> Result<(StepResult, Option<String>), Outcome> {
    let step = steps::exec(command);
    tokio::pin!(step);
    let mut early = None;
    loop {
        tokio::select! {
            result = &mut step => return Ok((result, early)),
            text = next_text(socket), if early.is_none() => early = Some(text?),
        }
    }
}

async fn send(socket: &mut Socket, message: &RemoteMessage) -> Result<(), String> {
    let text = serde_json::to_string(message).map_err(|err| err.to_string())?;
    socket
        .send(Message::text(text))
        .await
        .map_err(|err| err.to_string())
}

/// Sends a step's result; false when the connection is gone.
async fn reply(socket: &mut Socket, id: u64, result: StepResult) -> bool {
    let message = RemoteMessage::Result {
        id,
        exit_code: result.exit_code,
        output: result.output,
        truncated: result.truncated,
    };
    match send(socket, &message).await {
        Ok(()) => true,
        Err(err) => {
            eprintln!("devin-remote-sim: connection lost: {err}");
            false
        }
    }
}

/// Reads until the closing handshake completes (tungstenite answers the
/// peer's close frame while we read), bounded so a silent peer cannot keep
/// us alive.
async fn finish_close(socket: &mut Socket) {
    let drain = async { while let Some(Ok(_)) = socket.next().await {} };
    let _ = tokio::time::timeout(CLOSE_GRACE, drain).await;
}

/// A missing log line must not end the session; say so and go on.
fn record(state: &mut StateDir, step: serde_json::Value) {
    if let Err(err) = state.record_step(step) {
        eprintln!("devin-remote-sim: cannot record step: {err}");
    }
}
