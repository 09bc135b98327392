//! `SandboxList`: sandboxes by app, tags and age, newest first, one page.

use std::sync::Arc;

use modal::wire;
use tonic::{Request, Response, Status};

use crate::state::{MockSandbox, State};

/// Sandboxes returned per `SandboxList` page.
const LIST_PAGE: usize = 100;

pub(super) async fn sandbox_list(
    state: &Arc<State>,
    request: Request<wire::SandboxListRequest>,
) -> Result<Response<wire::SandboxListResponse>, Status> {
    state.enter("SandboxList")?;
    let r = request.into_inner();
    let inner = state.inner.lock().unwrap();
    let mut found: Vec<&MockSandbox> = inner
        .sandboxes
        .iter()
        .filter(|s| r.app_id.is_empty() || s.view.app_id == r.app_id)
        .filter(|s| r.include_finished || s.result.is_none())
        .filter(|s| r.before_timestamp == 0.0 || s.created_at < r.before_timestamp)
        .filter(|s| {
            r.tags.iter().all(|t| {
                s.view
                    .tags
                    .iter()
                    .any(|(k, v)| *k == t.tag_name && *v == t.tag_value)
            })
        })
        .collect();
    found.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
    found.truncate(LIST_PAGE);
    let sandboxes = found
        .into_iter()
        .map(|s| wire::SandboxInfo {
            id: s.view.id.clone(),
            created_at: s.created_at,
            app_id: s.view.app_id.clone(),
            tags: s
                .view
                .tags
                .iter()
                .map(|(k, v)| wire::SandboxTag {
                    tag_name: k.clone(),
                    tag_value: v.clone(),
                })
                .collect(),
            name: s.view.name.clone().unwrap_or_default(),
            image_id: s.view.definition.image_id.clone(),
            regions: s
                .view
                .definition
                .scheduler_placement
                .as_ref()
                .map(|p| p.regions.clone())
                .unwrap_or_default(),
            timeout_secs: s.view.definition.timeout_secs,
            idle_timeout_secs: s.view.definition.idle_timeout_secs,
            metadata: Some(wire::SandboxHandleMetadata {
                result: s.result.clone(),
                app_id: s.view.app_id.clone(),
            }),
        })
        .collect();
    Ok(Response::new(wire::SandboxListResponse { sandboxes }))
}
