//! Tags and listing. Modal sandbox tags carry Garrison's labels and the
//! root directory, so that listing finds what a crash left behind: in the
//! outpost's app and by its tag when an outpost is set, else across the
//! environment, keeping only sandboxes with a session label.

use std::collections::BTreeMap;

use sandbox::{Handle, Result};

use super::{ModalBackend, app_name_for, handle_for, status_error};
use crate::scripts;
use crate::wire;

/// Tag holding the absolute directory Garrison uses inside the sandbox.
pub(super) const TAG_ROOT: &str = "garrison.root";

impl ModalBackend {
    pub(super) async fn set_tags(
        &self,
        sandbox_id: &str,
        tags: Vec<wire::SandboxTag>,
    ) -> Result<()> {
        let request = wire::SandboxTagsSetRequest {
            environment_name: self.settings.environment.clone().unwrap_or_default(),
            sandbox_id: sandbox_id.to_owned(),
            tags,
        };
        self.client
            .retrying("SandboxTagsSetV2", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_tags_set_v2(request).await }
            })
            .await
            .map(|_| ())
            .map_err(|s| status_error("tagging the sandbox", s))
    }
}

impl ModalBackend {
    /// The tags of a sandbox.
    pub(super) async fn tags_of(&self, sandbox_id: &str) -> Result<BTreeMap<String, String>> {
        let request = wire::SandboxTagsGetRequest {
            sandbox_id: sandbox_id.to_owned(),
        };
        let answer = self
            .client
            .retrying("SandboxTagsGetV2", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_tags_get_v2(request).await }
            })
            .await
            .map_err(|s| status_error("reading the sandbox's tags", s))?;
        Ok(answer
            .tags
            .into_iter()
            .map(|t| (t.tag_name, t.tag_value))
            .collect())
    }
}

pub(super) fn tags(labels: &BTreeMap<String, String>) -> Vec<wire::SandboxTag> {
    labels
        .iter()
        .map(|(k, v)| wire::SandboxTag {
            tag_name: k.clone(),
            tag_value: v.clone(),
        })
        .collect()
}

pub(super) async fn list(backend: &ModalBackend) -> Result<Vec<Handle>> {
    // Without an outpost, every app of the environment ("" = all).
    let (app_id, tag_filter) = match &backend.settings.outpost_id {
        Some(outpost) => (
            backend.app_id(&app_name_for(outpost)).await?,
            vec![wire::SandboxTag {
                tag_name: sandbox::LABEL_OUTPOST_ID.to_owned(),
                tag_value: outpost.clone(),
            }],
        ),
        None => (String::new(), Vec::new()),
    };
    let mut handles = Vec::new();
    let mut before = 0.0;
    loop {
        let request = wire::SandboxListRequest {
            app_id: app_id.clone(),
            before_timestamp: before,
            environment_name: backend.settings.environment.clone().unwrap_or_default(),
            include_finished: false,
            tags: tag_filter.clone(),
        };
        let page = backend
            .client
            .retrying("SandboxListV2", |mut rpc| {
                let request = request.clone();
                async move { rpc.sandbox_list_v2(request).await }
            })
            .await
            .map_err(|s| status_error("listing sandboxes", s))?
            .sandboxes;
        let Some(oldest) = page.iter().map(|s| s.created_at).reduce(f64::min) else {
            break;
        };
        // Only sandboxes Garrison made (they carry a session label).
        for info in page {
            if !info
                .tags
                .iter()
                .any(|t| t.tag_name == sandbox::LABEL_SESSION_ID)
            {
                continue;
            }
            let mut labels: BTreeMap<String, String> = info
                .tags
                .into_iter()
                .map(|t| (t.tag_name, t.tag_value))
                .collect();
            let root = labels
                .remove(TAG_ROOT)
                .unwrap_or_else(|| format!("/{}", scripts::ROOT_DIR));
            let image = (!info.image_id.is_empty()).then_some(info.image_id);
            handles.push(handle_for(info.id, info.name, image, &root, labels));
        }
        if before != 0.0 && oldest >= before {
            break;
        }
        before = oldest;
    }
    handles.sort_by(|a, b| a.id.cmp(&b.id));
    handles.dedup_by(|a, b| a.id == b.id);
    // Sessions sleeping in a memory snapshot have no running sandbox.
    let sleeping = backend.sleeping_handles(&handles)?;
    handles.extend(sleeping);
    Ok(handles)
}
