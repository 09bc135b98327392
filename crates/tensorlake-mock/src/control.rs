//! The mock's own control endpoints (not part of Tensorlake's API), so a
//! test driving a `garrison mock tensorlake` process can ask for the
//! service's failure answers: `POST /_mock/faults` takes a [`Fault`],
//! `POST /_mock/create_outcomes` a [`CreateOutcome`]. Both need the key.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;

use crate::config::{CreateOutcome, Fault};
use crate::state::Shared;

pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/_mock/faults", post(add_fault))
        .route("/_mock/create_outcomes", post(add_create_outcome))
}

async fn add_fault(State(shared): State<Arc<Shared>>, Json(fault): Json<Fault>) -> StatusCode {
    shared.faults.lock().expect("faults").push(fault);
    StatusCode::NO_CONTENT
}

async fn add_create_outcome(
    State(shared): State<Arc<Shared>>,
    Json(outcome): Json<CreateOutcome>,
) -> StatusCode {
    shared
        .create_outcomes
        .lock()
        .expect("create outcomes")
        .push_back(outcome);
    StatusCode::NO_CONTENT
}
