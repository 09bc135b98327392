//! Apps: `AppGetOrCreate`, the namespace every sandbox and image lives in.

use std::sync::Arc;

use modal::wire;
use tonic::{Request, Response, Status};

use crate::ids::new_id;
use crate::state::State;

pub(super) async fn app_get_or_create(
    state: &Arc<State>,
    request: Request<wire::AppGetOrCreateRequest>,
) -> Result<Response<wire::AppGetOrCreateResponse>, Status> {
    state.enter("AppGetOrCreate")?;
    let r = request.into_inner();
    if r.app_name.is_empty() || r.app_name.len() > 64 {
        return Err(Status::invalid_argument("app names are 1 to 64 characters"));
    }
    let mut inner = state.inner.lock().unwrap();
    let creation = wire::ObjectCreationType::try_from(r.object_creation_type)
        .unwrap_or(wire::ObjectCreationType::Unspecified);
    let app_id = match (inner.apps.get(&r.app_name), creation) {
        (Some(id), wire::ObjectCreationType::CreateFailIfExists) => {
            return Err(Status::already_exists(format!(
                "app {} exists ({id})",
                r.app_name
            )));
        }
        (Some(id), _) => id.clone(),
        (None, wire::ObjectCreationType::Unspecified) => {
            return Err(Status::not_found(format!("app {} not found", r.app_name)));
        }
        (None, _) => {
            let id = new_id("ap");
            inner.apps.insert(r.app_name, id.clone());
            id
        }
    };
    Ok(Response::new(wire::AppGetOrCreateResponse { app_id }))
}
