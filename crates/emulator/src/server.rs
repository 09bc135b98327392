//! Puts the emulator together: the router over every HTTP module's routes,
//! request counting, the clock loop, and loading the distribution. The
//! HTTP modules never import this one; what they share lives in `shared`
//! and `http`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State as AxState};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;

use crate::config::{EmulatorConfig, locate_remote_sim};
use crate::distribution::Distribution;
use crate::http::MAX_BODY;
use crate::lock::lock;
use crate::shared::{Shared, SharedState};
use crate::{admin, connect, fleet_api, gateway, static_files};

/// How often the server's clock work (status lag, linger sweeper) runs.
const TICK: Duration = Duration::from_millis(25);

/// Loads the configured (or located) simulator binary; without one the
/// distribution is empty and answers 404.
pub(crate) fn load_distribution(config: &EmulatorConfig) -> Distribution {
    match config.remote_binary.clone().or_else(locate_remote_sim) {
        Some(path) => Distribution::load(&path).unwrap_or_else(|err| {
            tracing::warn!(path = %path.display(), %err, "remote binary unreadable; distribution disabled");
            Distribution::default()
        }),
        None => Distribution::default(),
    }
}

/// Runs the server's clock work until the emulator shuts down.
pub(crate) async fn tick_loop(shared: Arc<Shared>) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        shared.with_state(|s, now| s.tick(now));
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .merge(fleet_api::routes(shared.clone()))
        .merge(connect::routes())
        .merge(static_files::routes())
        .merge(gateway::routes())
        .merge(admin::routes())
        .route_layer(from_fn_with_state(shared.clone(), count_requests))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

/// Counts every routed request by method and route template.
async fn count_requests(AxState(shared): SharedState, req: Request, next: Next) -> Response {
    if let Some(path) = req.extensions().get::<MatchedPath>() {
        let key = format!("{} {}", req.method(), path.as_str());
        *lock(&shared.counts).entry(key).or_default() += 1;
    }
    next.run(req).await
}
