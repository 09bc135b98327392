//! Tensorlake's PTY websocket.
//!
//! `POST /api/v1/pty` makes a session; `GET /api/v1/pty/{id}/ws` with its token in `X-PTY-Token`
//! attaches to it. Every websocket message is binary, one opcode byte then
//! a payload (`src/tensorlake/sandbox/pty.py`, `typescript/src/sandbox.ts`
//! in <https://github.com/tensorlakeai/tensorlake>):
//!
//! | opcode | name   | payload                        | direction        |
//! |--------|--------|--------------------------------|------------------|
//! | `0x00` | data   | raw bytes                      | both             |
//! | `0x01` | resize | cols `u16` BE, rows `u16` BE   | client -> server |
//! | `0x02` | ready  | none: start sending output     | client -> server |
//! | `0x03` | exit   | exit code `i32` BE             | server -> client |
//!
//! The server may also end with a close frame whose reason is `exit:N`.

use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::error::{Error, Result};
use crate::urls::SANDBOX_ID_HEADER;

/// Opcode of a data frame (both ways).
pub(crate) const OP_DATA: u8 = 0x00;
/// Opcode of a resize (client to server).
pub(crate) const OP_RESIZE: u8 = 0x01;
/// Opcode of "ready: start sending output" (client to server).
pub(crate) const OP_READY: u8 = 0x02;
/// Opcode of the exit code (server to client).
pub(crate) const OP_EXIT: u8 = 0x03;

/// Largest websocket message accepted.
const MAX_MESSAGE: usize = 4 << 20;

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// Raw bytes.
    Data(Vec<u8>),
    /// The terminal's new size.
    Resize {
        /// Columns.
        cols: u16,
        /// Rows.
        rows: u16,
    },
    /// The client is listening.
    Ready,
    /// The command's exit code.
    Exit(i32),
    /// An opcode this client does not know, or a short frame: ignored.
    Unknown(u8),
}

impl Frame {
    /// The frame as one websocket message.
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Self::Data(data) => {
                let mut out = Vec::with_capacity(1 + data.len());
                out.push(OP_DATA);
                out.extend_from_slice(data);
                out
            }
            Self::Resize { cols, rows } => {
                let mut out = vec![OP_RESIZE];
                out.extend_from_slice(&cols.to_be_bytes());
                out.extend_from_slice(&rows.to_be_bytes());
                out
            }
            Self::Ready => vec![OP_READY],
            Self::Exit(code) => {
                let mut out = vec![OP_EXIT];
                out.extend_from_slice(&code.to_be_bytes());
                out
            }
            Self::Unknown(op) => vec![*op],
        }
    }

    /// Decodes a message; `None` for an empty one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let (&op, payload) = bytes.split_first()?;
        Some(match op {
            OP_DATA => Self::Data(payload.to_vec()),
            OP_RESIZE if payload.len() >= 4 => Self::Resize {
                cols: u16::from_be_bytes([payload[0], payload[1]]),
                rows: u16::from_be_bytes([payload[2], payload[3]]),
            },
            OP_READY => Self::Ready,
            OP_EXIT if payload.len() >= 4 => Self::Exit(i32::from_be_bytes([
                payload[0], payload[1], payload[2], payload[3],
            ])),
            other => Self::Unknown(other),
        })
    }
}

/// What an attached PTY produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PtyEvent {
    /// Bytes the command wrote.
    Output(Vec<u8>),
    /// The command exited with this code.
    Exited(i32),
    /// The websocket closed without an exit (the sandbox suspended, the
    /// connection idled out): attach again later.
    Closed {
        /// The close frame's reason, if any.
        reason: String,
    },
}

/// The header that carries a PTY session's token (the SDK's; it also
/// sends a `token` query parameter, which the service takes as a fallback).
pub(crate) const PTY_TOKEN_HEADER: &str = "X-PTY-Token";

/// An attached PTY session.
pub struct PtyConnection {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    done: bool,
}

impl PtyConnection {
    pub(crate) async fn connect(
        url: url::Url,
        api_key: &str,
        sandbox_id: &str,
        pty_token: &str,
    ) -> Result<Self> {
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|e| Error::WebSocket(e.to_string()))?;
        let headers = request.headers_mut();
        let mut auth = HeaderValue::from_str(&format!("Bearer {api_key}"))
            .map_err(|_| Error::Invalid("the API key is not a valid header value".into()))?;
        auth.set_sensitive(true);
        headers.insert("Authorization", auth);
        let mut token = HeaderValue::from_str(pty_token)
            .map_err(|_| Error::Invalid("the PTY token is not a valid header value".into()))?;
        token.set_sensitive(true);
        headers.insert(PTY_TOKEN_HEADER, token);
        headers.insert(
            SANDBOX_ID_HEADER,
            HeaderValue::from_str(sandbox_id).map_err(|e| Error::Invalid(e.to_string()))?,
        );
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let (socket, _) =
            tokio_tungstenite::connect_async_with_config(request, Some(config), false)
                .await
                .map_err(|e| match e {
                    tokio_tungstenite::tungstenite::Error::Http(response) => Error::Api {
                        status: response.status().as_u16(),
                        code: None,
                        message: "PTY websocket refused".into(),
                    },
                    other => Error::WebSocket(other.to_string()),
                })?;
        let mut connection = Self {
            socket,
            done: false,
        };
        connection.send(Frame::Ready).await?;
        Ok(connection)
    }

    async fn send(&mut self, frame: Frame) -> Result<()> {
        self.socket
            .send(Message::binary(frame.encode()))
            .await
            .map_err(|e| Error::WebSocket(e.to_string()))
    }

    /// Sends bytes to the command's input.
    pub async fn send_input(&mut self, data: &[u8]) -> Result<()> {
        self.send(Frame::Data(data.to_vec())).await
    }

    /// Tells the server the terminal's new size.
    pub async fn resize(&mut self, cols: u16, rows: u16) -> Result<()> {
        self.send(Frame::Resize { cols, rows }).await
    }

    /// The next thing the session did; `None` after an exit or a close.
    pub async fn next_event(&mut self) -> Option<PtyEvent> {
        if self.done {
            return None;
        }
        loop {
            let message = match self.socket.next().await {
                Some(Ok(message)) => message,
                Some(Err(e)) => {
                    self.done = true;
                    return Some(PtyEvent::Closed {
                        reason: e.to_string(),
                    });
                }
                None => {
                    self.done = true;
                    return Some(PtyEvent::Closed {
                        reason: "connection ended".into(),
                    });
                }
            };
            match message {
                Message::Binary(bytes) => match Frame::decode(&bytes) {
                    Some(Frame::Data(data)) => return Some(PtyEvent::Output(data)),
                    Some(Frame::Exit(code)) => {
                        self.done = true;
                        let _ = self.socket.close(None).await;
                        return Some(PtyEvent::Exited(code));
                    }
                    _ => {}
                },
                Message::Close(frame) => {
                    self.done = true;
                    let reason = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                    if let Some(code) = reason.strip_prefix("exit:") {
                        return Some(PtyEvent::Exited(code.trim().parse().unwrap_or(-1)));
                    }
                    return Some(PtyEvent::Closed { reason });
                }
                _ => {}
            }
        }
    }

    /// Closes the websocket (the session lives on).
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        for frame in [
            Frame::Data(b"hi".to_vec()),
            Frame::Resize { cols: 80, rows: 24 },
            Frame::Ready,
            Frame::Exit(-3),
        ] {
            assert_eq!(Frame::decode(&frame.encode()), Some(frame));
        }
        assert_eq!(
            Frame::Resize {
                cols: 0x0102,
                rows: 0x0304
            }
            .encode(),
            [1, 1, 2, 3, 4]
        );
        assert_eq!(Frame::decode(&[3, 0, 0]), Some(Frame::Unknown(3)));
        assert_eq!(Frame::decode(&[9]), Some(Frame::Unknown(9)));
        assert_eq!(Frame::decode(&[]), None);
    }
}
