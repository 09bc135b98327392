//! The websocket protocol between the emulator's gateway and the
//! `devin-remote` simulator.
//!
//! The real `devin-remote` protocol is private to Devin; this one is ours and
//! only needs to exercise what an orchestrator can observe: a remote that
//! dials out with its connect token, runs commands and writes files in its
//! working directory, and exits 0 when the session sleeps or ends.
//!
//! Handshake: the remote opens a websocket to `DEVIN_OUTPOST_GATEWAY_URL`
//! with the headers [`AUTHORIZATION`] (`Bearer <connect token>`) and
//! [`SESSION_HEADER`] (the session id). The gateway answers 401 to a missing
//! or wrong token, 403 to a token issued for another session or expired. After
//! the upgrade the remote sends [`RemoteMessage::Hello`]; the gateway then
//! sends [`GatewayMessage`]s one at a time and waits for each result.
//! Every message is one JSON text frame.

use serde::{Deserialize, Serialize};

/// The handshake header carrying `Bearer <connect token>`.
pub const AUTHORIZATION: &str = "authorization";
/// The handshake header carrying the session id.
pub const SESSION_HEADER: &str = "x-devin-session-id";

/// Largest output the remote returns for one command; the rest is cut and
/// `truncated` is set, so a chatty command cannot exhaust the gateway.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// From the gateway to the remote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GatewayMessage {
    /// Run `command` with `sh -c` in the working directory.
    Exec {
        /// Names the command; its result carries the same id.
        id: u64,
        /// The shell command line.
        command: String,
    },
    /// Write `content` to `path`, relative to the working directory, creating
    /// parent directories. Absolute paths and `..` are refused by the remote.
    WriteFile {
        /// Names the write; its result carries the same id.
        id: u64,
        /// Where, relative to the working directory.
        path: String,
        /// The whole file, as text.
        content: String,
    },
    /// Exit with `code` at once, as a crash would (no result is sent).
    Crash {
        /// Names the step (no result will carry it).
        id: u64,
        /// The exit code.
        code: i32,
    },
    /// The session went to sleep: exit 0.
    Sleep,
    /// The session ended: exit 0.
    End,
}

/// From the remote to the gateway.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RemoteMessage {
    /// The first message after the upgrade: who and where the remote is.
    Hello {
        /// The session the remote serves.
        session_id: String,
        /// The remote's working directory, as it sees it.
        cwd: String,
        /// Process id inside the sandbox, to tell restarts apart.
        pid: u32,
        /// The remote's version, for the transcript.
        version: String,
    },
    /// What a command or write came to.
    Result {
        /// The id of the [`GatewayMessage`] this answers.
        id: u64,
        /// The command's exit code (0 for a successful write).
        exit_code: i32,
        /// Stdout and stderr, at most [`MAX_OUTPUT_BYTES`].
        output: String,
        /// Whether `output` was cut at [`MAX_OUTPUT_BYTES`].
        #[serde(default)]
        truncated: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_json() {
        let m = GatewayMessage::Exec {
            id: 1,
            command: "ls".into(),
        };
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"type":"exec","id":1,"command":"ls"}"#
        );
        let r: RemoteMessage =
            serde_json::from_str(r#"{"type":"result","id":1,"exit_code":0,"output":"x"}"#).unwrap();
        assert_eq!(
            r,
            RemoteMessage::Result {
                id: 1,
                exit_code: 0,
                output: "x".into(),
                truncated: false
            }
        );
        let s: GatewayMessage = serde_json::from_str(r#"{"type":"sleep"}"#).unwrap();
        assert_eq!(s, GatewayMessage::Sleep);
    }
}
