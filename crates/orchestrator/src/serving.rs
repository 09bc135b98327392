//! What a running `serve` shares with the admin listener and commands, and
//! the operator's terminate request made through it. Apart from `serve`, so
//! the admin listener that `serve` starts can use it without an import
//! circle.

use std::sync::Arc;

use fleet::FleetClient;
use tracing::warn;

use crate::metrics::Metrics;
use crate::planner::{OperatorStop, Stage};
use crate::queue::QueueView;
use crate::room::StateRoom;
use crate::session::OperatorStops;
use crate::store::Store;

/// What a running `serve` shares with the admin listener and commands.
pub struct Serving {
    /// Who this Garrison is.
    pub acceptor_id: String,
    /// The state store.
    pub store: Arc<Store>,
    /// The counters.
    pub metrics: Arc<Metrics>,
    /// The fleet API.
    pub client: FleetClient,
    /// Each outpost's queue.
    pub views: Vec<Arc<QueueView>>,
    /// The runners of held sessions, for operator requests.
    pub operator_stops: Arc<OperatorStops>,
    /// The state directory's room: while short, nothing new is claimed.
    pub(crate) room: Arc<StateRoom>,
}

/// Why [`Serving::request_terminate`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminateError {
    /// No such session in the state store.
    NotFound,
    /// Known, but not held and running here now (done, already winding
    /// down, or left to the next Garrison).
    NotActive,
}

impl std::fmt::Display for TerminateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotFound => "no such session",
            Self::NotActive => "the session is not active here",
        })
    }
}

impl std::error::Error for TerminateError {}

impl Serving {
    /// Asks the session's runner to stop the sandbox, keep or drop the
    /// snapshot as asked, and release the claim (`garrison terminate`). The
    /// runner does it at its next step; the request itself returns at once.
    pub fn request_terminate(
        &self,
        session_id: &fleet::SessionId,
        keep_snapshot: bool,
    ) -> Result<(), TerminateError> {
        match self.store.session(session_id) {
            Ok(None) => return Err(TerminateError::NotFound),
            Ok(Some(rec)) if matches!(rec.stage, Stage::Done(_) | Stage::Finishing(_)) => {
                return Err(TerminateError::NotActive);
            }
            Ok(Some(_)) => {}
            Err(e) => warn!(
                session_id = session_id.as_str(),
                error = %e,
                "reading the state store failed"
            ),
        }
        if self
            .operator_stops
            .request(session_id, OperatorStop { keep_snapshot })
        {
            Ok(())
        } else {
            Err(TerminateError::NotActive)
        }
    }
}
