//! The transitions no request triggers: the server calls `tick` on an
//! interval, and it applies the sessions' lagged status changes and the
//! queue's linger sweep.

use fleet::{Phase, SessionStatus};

use super::State;

impl State {
    /// The server's own clock work: lagged status changes, and the sweeper
    /// that removes lingering pending rows of finished sessions.
    pub(crate) fn tick(&mut self, now: i64) {
        let due: Vec<(String, SessionStatus)> = self
            .sessions
            .values()
            .filter_map(|s| match &s.status_due {
                Some((status, at)) if *at <= now => Some((s.session_id.clone(), status.clone())),
                _ => None,
            })
            .collect();
        for (id, status) in due {
            let s = self.sessions.get_mut(&id).expect("listed above");
            s.status_due = None;
            self.set_status(&id, status, now);
        }
        let linger = self.timing.linger_ms;
        let mut sweep = Vec::new();
        for e in self.entries.values_mut() {
            let finished = self
                .sessions
                .get(&e.session_id)
                .is_some_and(|s| s.status.is_final());
            if e.phase != Phase::Pending || !finished {
                e.linger_until_ms = None;
                continue;
            }
            match e.linger_until_ms {
                None => e.linger_until_ms = Some(now + linger),
                Some(t) if t <= now => sweep.push(e.session_id.clone()),
                Some(_) => {}
            }
        }
        for id in sweep {
            self.remove_entry(&id, now);
        }
    }
}
