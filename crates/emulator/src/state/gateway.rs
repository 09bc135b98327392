//! The gateway's side of a session: admitting a remote by its connect token,
//! one remote at a time, and what its socket closing means for the status.

use fleet::SessionStatus;
use serde_json::json;

use super::State;

/// Why the gateway refuses a remote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum GatewayRefusal {
    /// Missing or unknown connect token.
    Unauthorized,
    /// Expired token, token of another session, or the session is over.
    Forbidden,
    /// Another remote of the same session is connected.
    Duplicate,
}

/// A connect token, minted by a claim; it admits remotes of its session.
#[derive(Clone, Debug)]
pub(super) struct ConnectTokenRec {
    pub(super) session_id: String,
    pub(super) expires_ms: i64,
}

impl State {
    /// Admits a remote: checks its connect token and that no other remote of
    /// the session is connected, then marks the session running. `peer` (the
    /// remote's address, where known) goes into the transcript, so a test
    /// with several hosts can tell whose remote connected.
    pub(crate) fn gateway_open(
        &mut self,
        token: Option<&str>,
        session_id: Option<&str>,
        conn: u64,
        peer: Option<&str>,
        now: i64,
    ) -> Result<(), GatewayRefusal> {
        let rec = token
            .and_then(|t| self.connect_tokens.get(t))
            .ok_or(GatewayRefusal::Unauthorized)?;
        let session_id = session_id.ok_or(GatewayRefusal::Forbidden)?;
        if rec.session_id != session_id || rec.expires_ms <= now {
            return Err(GatewayRefusal::Forbidden);
        }
        let s = self
            .sessions
            .get_mut(session_id)
            .ok_or(GatewayRefusal::Forbidden)?;
        if s.status == SessionStatus::Terminated {
            return Err(GatewayRefusal::Forbidden);
        }
        if let Some(other) = s.connected {
            s.record(
                now,
                "duplicate_connection",
                json!({"connected": other, "conn": conn, "peer": peer}),
            );
            return Err(GatewayRefusal::Duplicate);
        }
        s.connected = Some(conn);
        s.connections += 1;
        let n = s.connections;
        s.record(
            now,
            "connected",
            json!({"connection": n, "conn": conn, "peer": peer}),
        );
        let starting = !s.status.is_final() && s.status != SessionStatus::Running;
        if starting {
            self.set_status(session_id, SessionStatus::Running, now);
        }
        Ok(())
    }

    /// A remote's socket closed. If the session was being stopped, its
    /// status follows after the lag.
    pub(crate) fn gateway_closed(&mut self, session_id: &str, conn: u64, reason: &str, now: i64) {
        let lag = self.timing.status_lag_ms;
        let Some(s) = self.sessions.get_mut(session_id) else {
            return;
        };
        if s.connected != Some(conn) {
            return;
        }
        s.connected = None;
        s.record(now, "disconnected", json!({"reason": reason}));
        let pending = s
            .stopping
            .filter(|stop| s.status != stop.final_status() && s.status_due.is_none());
        if let Some(stop) = pending {
            s.status_due = Some((stop.final_status(), now + lag));
        }
    }
}
