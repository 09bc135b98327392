//! Which runners run now, so an operator's request (`garrison terminate`)
//! reaches the one that holds the session.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use fleet::SessionId;

use crate::planner::OperatorStop;

/// A registered runner: its generation and where its requests go.
type RunnerSlot = (u64, tokio::sync::watch::Sender<Option<OperatorStop>>);

/// The runners that are running now, by session id, and a way to hand each
/// an operator's request (`garrison terminate`). A runner registers itself
/// for as long as its `SessionRunner::run` runs.
#[derive(Default)]
pub struct OperatorStops {
    runners: Mutex<BTreeMap<SessionId, RunnerSlot>>,
    next: std::sync::atomic::AtomicU64,
}

impl OperatorStops {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<SessionId, RunnerSlot>> {
        self.runners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn register(self: &Arc<Self>, session_id: &SessionId) -> Registration {
        let generation = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = tokio::sync::watch::channel(None);
        self.lock().insert(session_id.clone(), (generation, tx));
        Registration {
            stops: self.clone(),
            session_id: session_id.clone(),
            generation,
            rx,
        }
    }

    /// Hands the request to the session's runner; `false` when no runner
    /// runs for it.
    pub fn request(&self, session_id: &SessionId, stop: OperatorStop) -> bool {
        match self.lock().get(session_id) {
            Some((_, tx)) => {
                tx.send_replace(Some(stop));
                true
            }
            None => false,
        }
    }

    /// Whether a runner runs for the session now.
    pub fn is_running(&self, session_id: &SessionId) -> bool {
        self.lock().contains_key(session_id)
    }
}

/// A runner's entry in [`OperatorStops`], removed when dropped.
pub(super) struct Registration {
    stops: Arc<OperatorStops>,
    session_id: SessionId,
    generation: u64,
    pub(super) rx: tokio::sync::watch::Receiver<Option<OperatorStop>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut runners = self.stops.lock();
        if runners
            .get(&self.session_id)
            .is_some_and(|(generation, _)| *generation == self.generation)
        {
            runners.remove(&self.session_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_requests_reach_only_a_registered_runner() {
        let stops = Arc::new(OperatorStops::default());
        let s = &SessionId::new("s").unwrap();
        let stop = OperatorStop {
            keep_snapshot: true,
        };
        assert!(!stops.request(s, stop));
        let first = stops.register(s);
        assert!(stops.is_running(s));
        assert!(stops.request(s, stop));
        assert_eq!(*first.rx.borrow(), Some(stop));
        // A later runner of the same session replaces the entry; the earlier
        // one going away does not remove it.
        let second = stops.register(s);
        drop(first);
        assert!(stops.is_running(s));
        assert!(stops.request(s, stop));
        assert_eq!(*second.rx.borrow(), Some(stop));
        drop(second);
        assert!(!stops.is_running(s));
        assert!(!stops.request(s, stop));
    }
}
