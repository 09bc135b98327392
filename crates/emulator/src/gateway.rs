//! The websocket gateway remotes dial (`crates/gateway-proto`): admits one
//! remote per session with its connect token, then relays the brain's
//! commands and books the remote's results.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use futures::StreamExt;
use gateway_proto::{GatewayMessage, RemoteMessage, SESSION_HEADER};
use serde_json::json;

use crate::brain::Command;
use crate::http::{ApiError, bearer};
use crate::shared::{Shared, SharedState, stopped};
use crate::state::GatewayRefusal;

/// How long a remote has to say hello after the upgrade.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a remote told to sleep, end or crash has to hang up.
const HANGUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest frame accepted from a remote (results are capped well below).
const MAX_FRAME: usize = 1024 * 1024;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new().route("/gateway", get(upgrade))
}

async fn upgrade(
    axum::extract::State(shared): SharedState,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let token = bearer(&headers).map(str::to_owned);
    let session_id = headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    // Refuse before admitting, so a plain GET never marks a session running.
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            if token.is_none() {
                return ApiError::unauthorized().into_response();
            }
            return rejection.into_response();
        }
    };
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip().to_string());
    let admitted = shared.with_state(|s, now| {
        s.gateway_open(
            token.as_deref(),
            session_id.as_deref(),
            conn,
            peer.as_deref(),
            now,
        )
    });
    if let Err(refusal) = admitted {
        let (status, code) = match refusal {
            GatewayRefusal::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            GatewayRefusal::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
            GatewayRefusal::Duplicate => (StatusCode::CONFLICT, "duplicate_connection"),
        };
        tracing::info!(
            session_id = session_id.as_deref(),
            code,
            "gateway refused a remote"
        );
        return ApiError::new(status, code, "connection refused").into_response();
    }
    let session_id = session_id.expect("admitted sessions have an id");
    tracing::info!(%session_id, conn, "remote connected");
    let failed = (shared.clone(), session_id.clone());
    ws.max_message_size(MAX_FRAME)
        .on_failed_upgrade(move |err| {
            let (shared, session_id) = failed;
            let reason = format!("upgrade failed: {err}");
            shared.with_state(|s, now| s.gateway_closed(&session_id, conn, &reason, now));
        })
        .on_upgrade(move |socket| async move {
            let reason = drive(&shared, &session_id, socket).await;
            tracing::info!(%session_id, conn, %reason, "remote disconnected");
            shared.with_state(|s, now| s.gateway_closed(&session_id, conn, &reason, now));
        })
}

enum Incoming {
    Message(RemoteMessage),
    Closed(String),
}

async fn next_message(socket: &mut WebSocket) -> Incoming {
    loop {
        match socket.next().await {
            None => return Incoming::Closed("connection lost".into()),
            Some(Err(err)) => return Incoming::Closed(format!("socket error: {err}")),
            Some(Ok(Message::Close(_))) => return Incoming::Closed("closed".into()),
            Some(Ok(Message::Text(text))) => match serde_json::from_str(text.as_str()) {
                Ok(message) => return Incoming::Message(message),
                Err(err) => return Incoming::Closed(format!("bad message: {err}")),
            },
            Some(Ok(_)) => continue,
        }
    }
}

async fn send(socket: &mut WebSocket, message: &GatewayMessage) -> Result<(), String> {
    let text = serde_json::to_string(message).map_err(|e| e.to_string())?;
    socket
        .send(Message::Text(text.into()))
        .await
        .map_err(|e| format!("send failed: {e}"))
}

/// Waits for the remote to hang up after sleep/end/crash; returns why the
/// connection ended.
async fn hangup(socket: &mut WebSocket, what: &str) -> String {
    let wait = async {
        loop {
            if let Incoming::Closed(_) = next_message(socket).await {
                return;
            }
        }
    };
    match tokio::time::timeout(HANGUP_TIMEOUT, wait).await {
        Ok(()) => format!("remote exited after {what}"),
        Err(_) => format!("remote did not exit after {what}; closed by gateway"),
    }
}

/// Runs one connection: hello, then the brain's commands one at a time.
/// Returns the reason the connection ended.
async fn drive(shared: &Arc<Shared>, session_id: &str, mut socket: WebSocket) -> String {
    let hello = match tokio::time::timeout(HELLO_TIMEOUT, next_message(&mut socket)).await {
        Err(_) => return "no hello".into(),
        Ok(Incoming::Closed(reason)) => return reason,
        Ok(Incoming::Message(m)) => m,
    };
    let RemoteMessage::Hello {
        cwd, pid, version, ..
    } = hello
    else {
        return "first message was not hello".into();
    };
    shared.with_state(|s, now| {
        s.record_event(
            session_id,
            "hello",
            json!({"cwd": cwd, "pid": pid, "version": version}),
            now,
        )
    });
    let mut kick = shared.kick.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        kick.mark_unchanged();
        let command = shared.with_state(|s, now| s.brain_next(session_id, now));
        match command {
            Command::Stop(message) => {
                if let Err(e) = send(&mut socket, &message).await {
                    return e;
                }
                let what = serde_json::to_value(&message)
                    .ok()
                    .and_then(|v| v["type"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                return hangup(&mut socket, &what).await;
            }
            Command::Crash(message) => {
                if let Err(e) = send(&mut socket, &message).await {
                    return e;
                }
                return hangup(&mut socket, "crash").await;
            }
            Command::Step(message, id) => {
                if let Err(e) = send(&mut socket, &message).await {
                    return e;
                }
                // Wait for this step's result; a stop request meanwhile is
                // sent at once (the step stays undone and is re-sent later).
                loop {
                    tokio::select! {
                        incoming = next_message(&mut socket) => match incoming {
                            Incoming::Closed(reason) => return reason,
                            Incoming::Message(RemoteMessage::Result { id: rid, exit_code, output, truncated }) => {
                                shared.with_state(|s, now| {
                                    s.brain_result(session_id, rid, exit_code, &output, truncated, now)
                                });
                                if rid == id {
                                    break;
                                }
                            }
                            Incoming::Message(RemoteMessage::Hello { .. }) => {}
                        },
                        changed = kick.changed() => {
                            if changed.is_err() {
                                return "emulator stopped".into();
                            }
                            if stopping(shared, session_id) {
                                break;
                            }
                        }
                        _ = stopped(&mut shutdown) => return "emulator stopped".into(),
                    }
                }
            }
            Command::Idle => {
                tokio::select! {
                    incoming = next_message(&mut socket) => {
                        if let Incoming::Closed(reason) = incoming {
                            return reason;
                        }
                    }
                    changed = kick.changed() => {
                        if changed.is_err() {
                            return "emulator stopped".into();
                        }
                    }
                    _ = stopped(&mut shutdown) => return "emulator stopped".into(),
                }
            }
        }
    }
}

fn stopping(shared: &Shared, session_id: &str) -> bool {
    shared.with_state(|s, _| {
        s.sessions
            .get(session_id)
            .is_some_and(|rec| rec.stopping.is_some() || rec.status.is_final())
    })
}
