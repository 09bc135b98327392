//! PTY sessions and their binary websocket (`src/tensorlake/sandbox/pty.py`
//! in <https://github.com/tensorlakeai/tensorlake>): one opcode byte, then
//! the payload. Data `0x00` both ways, resize `0x01` (cols, rows: `u16` BE),
//! ready `0x02` (the client is listening), exit `0x03` (`i32` BE), and a
//! close frame `exit:N` after the exit.
//!
//! The mock runs the command with pipes rather than a terminal (its output
//! is stdout and stderr merged; resizes are accepted and ignored). Output
//! is kept, and a client attaching again gets what no client has received
//! yet. Suspending the sandbox closes the websocket (reason
//! `sandbox suspended`); attaching to a sandbox that is not running is
//! refused with 409.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use futures::{SinkExt, StreamExt};
use nix::sys::signal::Signal;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

pub(crate) mod session;

use crate::dataplane::target;
use crate::host;
use crate::reply::{Reply, error};
use crate::state::Shared;
use session::{Output, PtySession};

const OP_DATA: u8 = 0x00;
const OP_READY: u8 = 0x02;
const OP_EXIT: u8 = 0x03;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/v1/pty", post(create))
        .route("/api/v1/pty/{session}", delete(remove))
        .route("/api/v1/pty/{session}/ws", get(attach))
}

#[derive(Deserialize)]
struct CreateBody {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    working_dir: Option<String>,
}

async fn create(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Json(body): Json<CreateBody>,
) -> Reply {
    let (id, dir) = target(&shared, &headers)?;
    let cwd = match &body.working_dir {
        Some(path) => host::inside(&dir, path).ok_or_else(|| {
            error(
                StatusCode::BAD_REQUEST,
                "INVALID_PATH",
                "working_dir is outside the sandbox",
            )
        })?,
        None => dir,
    };
    let mut child = tokio::process::Command::new(&body.command)
        .args(&body.args)
        .env_clear()
        .envs(&body.env)
        .current_dir(cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| error(StatusCode::BAD_REQUEST, "SPAWN_FAILED", &e.to_string()))?;
    let session_id = crate::state::new_id();
    let session = Arc::new(PtySession {
        group: crate::group::Group::new(child.id().unwrap_or(0) as i32),
        token: crate::state::new_id(),
        output: Mutex::new(Output::default()),
        changed: watch::channel(0).0,
        stdin: tokio::sync::Mutex::new(child.stdin.take()),
        kicked: watch::channel(None).0,
    });
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut pipe| {
        let session = session.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                session.push(&buf[..n]);
            }
        })
    })
    .collect();
    let waiter = session.clone();
    tokio::spawn(async move {
        let status = waiter.group.reap(&mut child).await;
        for reader in readers {
            let _ = tokio::time::timeout(std::time::Duration::from_millis(500), reader).await;
        }
        let code = status
            .ok()
            .map(|s| {
                use std::os::unix::process::ExitStatusExt;
                s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
            })
            .unwrap_or(-1);
        waiter.output.lock().expect("pty").exit = Some(code);
        waiter.changed.send_modify(|v| *v += 1);
    });
    let token = session.token.clone();
    let mut inner = shared.lock();
    let sandbox = inner.sandboxes.get_mut(&id).ok_or_else(|| {
        error(
            StatusCode::NOT_FOUND,
            "SANDBOX_NOT_FOUND",
            "sandbox not found",
        )
    })?;
    sandbox.ptys.insert(session_id.clone(), session);
    Ok(Json(serde_json::json!({ "session_id": session_id, "token": token })).into_response())
}

fn session_of(shared: &Shared, id: &str, session: &str) -> Result<Arc<PtySession>, Response> {
    shared
        .lock()
        .sandboxes
        .get(id)
        .and_then(|s| s.ptys.get(session).cloned())
        .ok_or_else(|| {
            error(
                StatusCode::NOT_FOUND,
                "PTY_NOT_FOUND",
                "no such PTY session",
            )
        })
}

async fn remove(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(session): Path<String>,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    let pty = session_of(&shared, &id, &session)?;
    pty.group.signal(Signal::SIGKILL);
    pty.kick("session terminated");
    if let Some(s) = shared.lock().sandboxes.get_mut(&id) {
        s.ptys.remove(&session);
    }
    Ok(Json(serde_json::json!({})).into_response())
}

#[derive(Deserialize)]
struct TokenQuery {
    #[serde(default)]
    token: Option<String>,
}

/// The header a PTY token travels in; the `token` query parameter is the
/// service's fallback.
const PTY_TOKEN_HEADER: &str = "x-pty-token";

async fn attach(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(session): Path<String>,
    Query(query): Query<TokenQuery>,
    upgrade: WebSocketUpgrade,
) -> Reply {
    let (id, _) = target(&shared, &headers)?;
    let pty = session_of(&shared, &id, &session)?;
    let from_header = headers
        .get(PTY_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let carrier = if from_header.is_some() {
        "header"
    } else {
        "query"
    };
    let given = from_header.or(query.token);
    shared
        .pty_token_carriers
        .lock()
        .expect("pty token carriers")
        .push(carrier);
    if given.as_deref() != Some(pty.token.as_str()) {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "bad PTY token",
        ));
    }
    // A kick before this attach must not close it.
    pty.kicked.send_replace(None);
    Ok(upgrade.on_upgrade(move |socket| serve(socket, pty)))
}

async fn serve(socket: WebSocket, pty: Arc<PtySession>) {
    let (mut tx, mut rx) = socket.split();
    let mut changed = pty.changed.subscribe();
    let mut kicked = pty.kicked.subscribe();
    let mut ready = false;
    loop {
        if ready {
            let (chunk, exit) = {
                let mut out = pty.output.lock().expect("pty");
                let from = out.delivered.max(out.base) - out.base;
                let chunk = out.bytes[from..].to_vec();
                out.delivered = out.base + out.bytes.len();
                (chunk, out.exit)
            };
            if !chunk.is_empty() {
                let mut frame = vec![OP_DATA];
                frame.extend_from_slice(&chunk);
                if tx.send(Message::Binary(frame.into())).await.is_err() {
                    return;
                }
            }
            if let Some(code) = exit {
                let mut frame = vec![OP_EXIT];
                frame.extend_from_slice(&code.to_be_bytes());
                let _ = tx.send(Message::Binary(frame.into())).await;
                let _ = tx
                    .send(Message::Close(Some(CloseFrame {
                        code: 1000,
                        reason: format!("exit:{code}").into(),
                    })))
                    .await;
                return;
            }
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = kicked.changed() => {
                let reason = kicked.borrow().clone();
                if let Some(reason) = reason {
                    let _ = tx.send(Message::Close(Some(CloseFrame { code: 1001, reason: reason.into() }))).await;
                    return;
                }
            }
            message = rx.next() => match message {
                Some(Ok(Message::Binary(bytes))) => match bytes.first() {
                    Some(&OP_READY) => ready = true,
                    Some(&OP_DATA) => {
                        if let Some(stdin) = pty.stdin.lock().await.as_mut() {
                            let _ = stdin.write_all(&bytes[1..]).await;
                        }
                    }
                    // Resize and unknown opcodes: nothing to do with pipes.
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
        }
    }
}
