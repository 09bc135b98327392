//! Claims on queue rows: the claim compare-and-swap that also mints a
//! connect token, the holder's release, and the lazy expiry of idle claims.

use fleet::{Phase, QueueEntry, Secret, SessionStatus};
use serde_json::json;

use super::gateway::ConnectTokenRec;
use super::{State, StateError, check_id, random_hex};

impl State {
    /// Lazy claim expiry, run on fleet API calls: an expired claim returns
    /// to the queue unless its session is running, because a live session
    /// stays with its worker.
    pub(crate) fn expire_claims(&mut self, now: i64) {
        let expired: Vec<String> = self
            .entries
            .values()
            .filter(|e| e.phase == Phase::Claimed && e.claim_deadline_ms.is_some_and(|d| d <= now))
            .filter(|e| {
                self.sessions
                    .get(&e.session_id)
                    .is_none_or(|s| s.status != SessionStatus::Running)
            })
            .map(|e| e.session_id.clone())
            .collect();
        for id in expired {
            let e = self.entries.get_mut(&id).expect("listed above");
            let acceptor = e.acceptor_id.take();
            e.phase = Phase::Pending;
            e.claim_deadline_ms = None;
            e.updated_ms = now;
            self.record(&id, now, "claim_expired", json!({"acceptor_id": acceptor}));
            self.emit_modified(&id);
        }
    }

    /// The claim compare-and-swap. Returns the entry and a fresh connect
    /// token on success.
    pub(crate) fn claim(
        &mut self,
        session_id: &str,
        acceptor_id: &str,
        now: i64,
    ) -> Result<(QueueEntry, String), StateError> {
        check_id("acceptor_id", acceptor_id)?;
        let running = self
            .sessions
            .get(session_id)
            .is_some_and(|s| s.status == SessionStatus::Running);
        let e = self
            .entries
            .get_mut(session_id)
            .ok_or_else(|| StateError::NotFound("entry".into()))?;
        let renewal = e.phase == Phase::Claimed && e.acceptor_id.as_deref() == Some(acceptor_id);
        let expired = e.claim_deadline_ms.is_none_or(|d| d <= now);
        let free = e.phase != Phase::Claimed || (expired && !running);
        if !renewal && !free {
            return Err(StateError::Conflict("claimed by another acceptor".into()));
        }
        e.phase = Phase::Claimed;
        e.acceptor_id = Some(acceptor_id.to_owned());
        e.claim_deadline_ms = Some(now + self.timing.claim_ttl_ms);
        e.updated_ms = now;
        e.linger_until_ms = None;
        let token = format!("ct_{}", random_hex(24));
        self.connect_tokens.insert(
            token.clone(),
            ConnectTokenRec {
                session_id: session_id.to_owned(),
                expires_ms: now + self.timing.connect_token_ttl_ms,
            },
        );
        let kind = if renewal { "renewed" } else { "claimed" };
        self.record(session_id, now, kind, json!({"acceptor_id": acceptor_id}));
        self.emit_modified(session_id);
        let mut entry = self.render(session_id).expect("row exists");
        entry.status.connect_token = Some(Secret::new(token.clone()));
        Ok((entry, token))
    }

    #[cfg(test)]
    pub(crate) fn release(
        &mut self,
        session_id: &str,
        acceptor_id: &str,
        now: i64,
    ) -> Result<QueueEntry, StateError> {
        self.release_telling(session_id, acceptor_id, now, true)
    }

    /// [`Self::release`]; `tell_watchers: false` changes the row without
    /// a watch event, as the reference server's model does (the fault
    /// `silent_release`): watchers learn of it with the next change.
    pub(crate) fn release_telling(
        &mut self,
        session_id: &str,
        acceptor_id: &str,
        now: i64,
        tell_watchers: bool,
    ) -> Result<QueueEntry, StateError> {
        check_id("acceptor_id", acceptor_id)?;
        let finished = self
            .sessions
            .get(session_id)
            .is_some_and(|s| s.status.is_final());
        let linger = self.timing.linger_ms;
        let e = self
            .entries
            .get_mut(session_id)
            .ok_or_else(|| StateError::NotFound("entry".into()))?;
        if e.phase != Phase::Claimed || e.acceptor_id.as_deref() != Some(acceptor_id) {
            // Kept in the transcript: a release the fleet API refuses is
            // a request an acceptor should not have sent (tests count them).
            self.record(
                session_id,
                now,
                "release_refused",
                json!({"acceptor_id": acceptor_id}),
            );
            return Err(StateError::Conflict("not the holder of the claim".into()));
        }
        e.phase = Phase::Pending;
        e.acceptor_id = None;
        e.claim_deadline_ms = None;
        e.updated_ms = now;
        if finished {
            e.linger_until_ms = Some(now + linger);
        }
        self.record(
            session_id,
            now,
            "released",
            json!({"acceptor_id": acceptor_id}),
        );
        if tell_watchers {
            self.emit_modified(session_id);
        }
        Ok(self.render(session_id).expect("row exists"))
    }
}
