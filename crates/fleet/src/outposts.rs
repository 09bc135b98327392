//! Outpost CRUD.
//!
//! The protocol page documents `/opbeta/outposts/outposts[/{id}]`, while
//! deployed clients call the prefix itself (`/opbeta/outposts[/{id}]`), and
//! so does Cognition's model of the server. The client tries the prefix
//! spelling first and falls back to the documented one on 404/405; the
//! first spelling that answers 2xx is remembered for the life of the
//! client, after which a 404 means "no such outpost".

use std::sync::atomic::Ordering;

use tracing::{debug, warn};

use crate::client::{Call, FleetClient, RawPage, SCOPE_MACHINE, SCOPE_ORCHESTRATOR};
use crate::error::FleetError;
use crate::http;
use crate::stats::route;
use crate::wire::{CreateOutpost, Outpost};

/// Outposts per page when listing.
const OUTPOST_PAGE_SIZE: u32 = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spelling {
    /// `/opbeta/outposts/outposts[/{id}]`
    Documented = 1,
    /// `/opbeta/outposts[/{id}]`
    Prefix = 2,
}

impl FleetClient {
    /// All outposts of the account, following paging (`cursor` or
    /// `end_cursor`, `has_next_page`). Items that do not parse are skipped
    /// with a warning.
    pub async fn list_outposts(&self) -> Result<Vec<Outpost>, FleetError> {
        let mut outposts = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.inner.options.max_list_pages {
            let raw = self
                .outposts_call(|spelling| {
                    let mut url = self.outposts_url(spelling, None)?;
                    {
                        let mut q = url.query_pairs_mut();
                        q.append_pair("first", &OUTPOST_PAGE_SIZE.to_string());
                        if let Some(c) = &cursor {
                            // Both paging parameter names are in use; a
                            // server ignores the one it does not know.
                            q.append_pair("cursor", c);
                            q.append_pair("after", c);
                        }
                    }
                    Ok(Call::get(route::LIST_OUTPOSTS, url))
                })
                .await?;
            if !raw.is_success() {
                return Err(self.status_error(route::LIST_OUTPOSTS, SCOPE_MACHINE, &raw));
            }
            let value: serde_json::Value = self.decode(route::LIST_OUTPOSTS, &raw.body)?;
            let page = RawPage::from_value(route::LIST_OUTPOSTS, &value)?;
            let mut skipped = 0;
            for item in page.items {
                match serde_json::from_value::<Outpost>(item) {
                    Ok(o) => outposts.push(o),
                    Err(error) => {
                        let error = self.scrub(&error.to_string());
                        warn!(route = route::LIST_OUTPOSTS, %error, "skipping an outpost that does not parse");
                        skipped += 1;
                    }
                }
            }
            self.inner.stats.skipped(route::LIST_OUTPOSTS, skipped);
            if !page.has_next_page {
                return Ok(outposts);
            }
            match page.cursor {
                Some(next) if cursor.as_deref() != Some(next.as_str()) => cursor = Some(next),
                _ => {
                    return Err(FleetError::Paging {
                        route: route::LIST_OUTPOSTS,
                        message: "has_next_page without a new cursor".into(),
                    });
                }
            }
        }
        Err(FleetError::Paging {
            route: route::LIST_OUTPOSTS,
            message: format!("more than {} pages", self.inner.options.max_list_pages),
        })
    }

    /// Creates an outpost (needs scope `account.outposts.orchestrator`).
    /// Not retried.
    pub async fn create_outpost(&self, body: &CreateOutpost) -> Result<Outpost, FleetError> {
        let json = serde_json::to_value(body)
            .map_err(|e| FleetError::InvalidArgument(format!("cannot encode outpost: {e}")))?;
        let raw = self
            .outposts_call(|spelling| {
                Ok(Call::post(
                    route::CREATE_OUTPOST,
                    self.outposts_url(spelling, None)?,
                    json.clone(),
                ))
            })
            .await?;
        if !raw.is_success() {
            return Err(self.status_error(route::CREATE_OUTPOST, SCOPE_ORCHESTRATOR, &raw));
        }
        self.decode(route::CREATE_OUTPOST, &raw.body)
    }

    /// One outpost; `None` on 404. Needs scope
    /// `account.outposts.orchestrator` (Devin's reference: "Create, get,
    /// and delete require the orchestrator scope"); a machine token meets
    /// 403 and should check its outpost through the queue instead.
    pub async fn get_outpost(&self, outpost_id: &str) -> Result<Option<Outpost>, FleetError> {
        let id = http::segment(outpost_id)?;
        let raw = self
            .outposts_call(|spelling| {
                Ok(Call::get(
                    route::GET_OUTPOST,
                    self.outposts_url(spelling, Some(&id))?,
                ))
            })
            .await?;
        match raw.status {
            404 => Ok(None),
            _ if raw.is_success() => self.decode(route::GET_OUTPOST, &raw.body).map(Some),
            _ => Err(self.status_error(route::GET_OUTPOST, SCOPE_ORCHESTRATOR, &raw)),
        }
    }

    /// Deletes an outpost (needs scope `account.outposts.orchestrator`).
    /// [`FleetError::NotFound`] when there is no such outpost. Not retried.
    pub async fn delete_outpost(&self, outpost_id: &str) -> Result<(), FleetError> {
        let id = http::segment(outpost_id)?;
        let raw = self
            .outposts_call(|spelling| {
                Ok(Call::delete(
                    route::DELETE_OUTPOST,
                    self.outposts_url(spelling, Some(&id))?,
                ))
            })
            .await?;
        if raw.is_success() {
            Ok(())
        } else {
            Err(self.status_error(route::DELETE_OUTPOST, SCOPE_ORCHESTRATOR, &raw))
        }
    }

    fn outposts_url(&self, spelling: Spelling, id: Option<&str>) -> Result<url::Url, FleetError> {
        match (spelling, id) {
            (Spelling::Documented, None) => self.url(&["outposts"]),
            (Spelling::Documented, Some(id)) => self.url(&["outposts", id]),
            (Spelling::Prefix, None) => self.url(&[]),
            (Spelling::Prefix, Some(id)) => self.url(&[id]),
        }
    }

    /// Sends with the remembered spelling, or discovers it: documented
    /// first, prefix on 404/405.
    async fn outposts_call(
        &self,
        make: impl Fn(Spelling) -> Result<Call, FleetError>,
    ) -> Result<crate::client::Raw, FleetError> {
        let known = match self.inner.outposts_spelling.load(Ordering::Relaxed) {
            1 => Some(Spelling::Documented),
            2 => Some(Spelling::Prefix),
            _ => None,
        };
        if let Some(spelling) = known {
            return self.execute(make(spelling)?).await;
        }
        let raw = self.execute(make(Spelling::Prefix)?).await?;
        if raw.is_success() {
            self.remember(Spelling::Prefix);
        }
        if raw.status != 404 && raw.status != 405 {
            return Ok(raw);
        }
        debug!(
            status = raw.status,
            "outposts route not found, trying the documented spelling"
        );
        let fallback = self.execute(make(Spelling::Documented)?).await?;
        if fallback.is_success() {
            self.remember(Spelling::Documented);
        }
        Ok(fallback)
    }

    fn remember(&self, spelling: Spelling) {
        self.inner
            .outposts_spelling
            .store(spelling as u8, Ordering::Relaxed);
    }
}
