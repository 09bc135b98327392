//! What every runner of an outpost shares: built once by `serve`, read by
//! the runners and by the clean-up around them.

use std::sync::Arc;

use fleet::FleetClient;
use sandbox::Sandbox;
use tokio_util::sync::CancellationToken;

use super::claim_keeper::LearnedLifetime;
use super::registry::OperatorStops;
use crate::metrics::Metrics;
use crate::planner::Policy;
use crate::queue::QueueView;
use crate::remote::RemoteResolver;
use crate::room::StateRoom;
use crate::session_log::SessionLogs;
use crate::settings::OutpostConfig;
use crate::store::Store;

/// Everything a runner needs, shared by all runners of an outpost.
pub(crate) struct Deps {
    /// The fleet API, for claims, renewals and releases.
    pub client: FleetClient,
    /// The outpost's sandbox backend.
    pub backend: Arc<dyn Sandbox>,
    /// The state store every step is recorded in.
    pub store: Arc<Store>,
    /// Where the remote binary comes from, verified.
    pub resolver: Arc<RemoteResolver>,
    /// The outpost's queue as last seen.
    pub view: Arc<QueueView>,
    /// The per-session logs (events and the remote's output).
    pub logs: SessionLogs,
    /// Counters and timings for the admin listener.
    pub metrics: Arc<Metrics>,
    /// Who this Garrison is to the fleet API.
    pub acceptor_id: String,
    /// The outpost the runners serve.
    pub outpost: OutpostConfig,
    /// The planner's knobs.
    pub policy: Policy,
    /// The gateway for a claim that carries none (`gateway_url`).
    pub gateway_url: Option<String>,
    /// Set when Garrison is shutting down.
    pub stopping: CancellationToken,
    /// With `stopping`: keep serving running sessions until they end.
    pub drain: bool,
    /// Where operator requests reach the runners (shared by all outposts).
    pub operator_stops: Arc<OperatorStops>,
    /// The state directory's room (shared by all outposts): claims wait
    /// while it is short.
    pub room: Arc<StateRoom>,
    /// The claim lifetime this outpost's server grants, as learned.
    pub learned_lifetime: Arc<LearnedLifetime>,
    /// This host's mirrors of the repositories sessions clone (shared by
    /// all outposts).
    pub mirrors: Arc<crate::repos::Mirrors>,
}
