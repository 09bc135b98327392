//! The queue endpoints of the fleet API: list (one page or the whole queue),
//! get, claim and release. Each call maps the statuses that mean something
//! for its route (404, 409) and leaves the rest to
//! [`FleetClient::status_error`].

use std::collections::HashMap;

use tracing::{debug, warn};

use super::base::{FleetClient, MAX_PAGE_SIZE, SCOPE_MACHINE};
use super::page::{RawPage, parse_entry};
use super::request::Call;
use crate::error::{ClaimError, FleetError};
use crate::http;
use crate::session_id::SessionId;
use crate::stats::route;
use crate::wire::{AcceptorBody, ListPage, Phase, QueueEntry};

/// Parameters of `GET /devins`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// The `outpost` filter; empty lists the whole account's queue (Devin's
    /// reference: "Filter by outpost ID").
    pub outpost: String,
    /// Only entries in this phase.
    pub phase: Option<Phase>,
    /// Only entries claimed by this acceptor.
    pub acceptor_id: Option<String>,
    /// Page size, clamped to 1..=200; the server's default (100) when `None`.
    pub first: Option<u32>,
    /// Where the previous page ended.
    pub cursor: Option<String>,
}

impl ListQuery {
    /// Every entry of `outpost`.
    pub fn new(outpost: impl Into<String>) -> Self {
        Self {
            outpost: outpost.into(),
            ..Self::default()
        }
    }

    /// The account's whole queue, every outpost the token can see.
    pub fn account() -> Self {
        Self::default()
    }

    /// Only entries in `phase`.
    pub fn phase(mut self, phase: Phase) -> Self {
        self.phase = Some(phase);
        self
    }

    /// Only entries claimed by `acceptor_id`.
    pub fn acceptor_id(mut self, acceptor_id: impl Into<String>) -> Self {
        self.acceptor_id = Some(acceptor_id.into());
        self
    }

    /// At most `first` entries per page.
    pub fn first(mut self, first: u32) -> Self {
        self.first = Some(first);
        self
    }

    /// Continue after `cursor`.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }
}

/// How [`FleetClient::list_all_from`] goes on after a page that says
/// `has_next_page`.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// A new cursor: follow it.
    Follow,
    /// The same cursor: ask again with this larger page.
    Grow(u32),
    /// The same cursor at the largest page size with nothing new.
    Stuck,
}

/// Pure paging decision: `next` is the page's cursor, `new_ids` how many
/// entries it added that were not seen before.
fn next_step(query: &ListQuery, next: &str, new_ids: usize) -> Next {
    if query.cursor.as_deref() != Some(next) {
        return Next::Follow;
    }
    let first = query.first.unwrap_or(100).clamp(1, MAX_PAGE_SIZE);
    if first < MAX_PAGE_SIZE {
        return Next::Grow((first.saturating_mul(2)).min(MAX_PAGE_SIZE));
    }
    if new_ids > 0 {
        // The server moved on without moving its cursor; a repeat of the
        // same request could still bring more, bounded by the caps.
        return Next::Follow;
    }
    Next::Stuck
}

/// What a release did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// 200: the session is back in the queue.
    Released,
    /// 409: the caller does not hold the claim (it expired and someone else
    /// took it, or it was never ours). Nothing left to release.
    NotHolder,
    /// 404: the entry is gone. Nothing left to release.
    Gone,
}

impl FleetClient {
    /// One page of the queue. Items that fail to parse or validate are
    /// skipped with a warning and counted in [`ListPage::skipped`].
    pub async fn list_page(&self, query: &ListQuery) -> Result<ListPage, FleetError> {
        let mut url = self.url(&["devins"])?;
        {
            let mut q = url.query_pairs_mut();
            if !query.outpost.is_empty() {
                q.append_pair("outpost", &query.outpost);
            }
            if let Some(phase) = &query.phase {
                q.append_pair("phase", phase.as_str());
            }
            if let Some(acceptor_id) = &query.acceptor_id {
                q.append_pair("acceptor_id", acceptor_id);
            }
            if let Some(first) = query.first {
                q.append_pair("first", &first.clamp(1, MAX_PAGE_SIZE).to_string());
            }
            if let Some(cursor) = &query.cursor {
                q.append_pair("cursor", cursor);
            }
        }
        let raw = self.execute(Call::get(route::LIST, url)).await?;
        if !raw.is_success() {
            return Err(self.status_error(route::LIST, SCOPE_MACHINE, &raw));
        }
        let value: serde_json::Value = self.decode(route::LIST, &raw.body)?;
        let page = RawPage::from_value(route::LIST, &value)?;
        let mut items = Vec::with_capacity(page.items.len());
        let mut skipped = 0;
        for item in page.items {
            match parse_entry(item) {
                Ok(entry) => items.push(entry),
                Err(reason) => {
                    let reason = self.scrub(&reason);
                    warn!(route = route::LIST, %reason, "skipping a queue entry that does not parse");
                    skipped += 1;
                }
            }
        }
        self.inner.stats.skipped(route::LIST, skipped as u64);
        Ok(ListPage {
            items,
            cursor: page.cursor,
            has_next_page: page.has_next_page,
            total: page.total,
            skipped,
        })
    }

    /// The whole queue of `outpost` (optionally filtered), following the
    /// cursor while `has_next_page`, upserting by session id (an item on a
    /// page boundary can repeat; the later copy wins, in first-seen order).
    ///
    /// Returns the entries and the last cursor the server gave, to start
    /// [`FleetClient::watch`] from. Pages of [`crate::ClientOptions::list_page_size`].
    pub async fn list_all(
        &self,
        outpost: &str,
        phase: Option<Phase>,
        acceptor_id: Option<&str>,
    ) -> Result<(Vec<QueueEntry>, Option<String>), FleetError> {
        let query = ListQuery {
            outpost: outpost.to_owned(),
            phase,
            acceptor_id: acceptor_id.map(str::to_owned),
            first: Some(self.inner.options.list_page_size),
            cursor: None,
        };
        self.list_all_from(query).await
    }

    /// [`FleetClient::list_all`] with a full query: its `first` is the page
    /// size and its `cursor` the starting point.
    ///
    /// Pages overlap (the server's `>=` boundary repeats the row at the
    /// cursor) and several rows can share the cursor's instant, so the same
    /// cursor can come back: then the next page asks for more rows (doubling,
    /// up to 200) to get past the tie. Only a page that brings nothing new at
    /// the largest size, or the page and item caps, stop the relist.
    pub async fn list_all_from(
        &self,
        mut query: ListQuery,
    ) -> Result<(Vec<QueueEntry>, Option<String>), FleetError> {
        let opts = &self.inner.options;
        let mut entries: Vec<QueueEntry> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut last_cursor = query.cursor.clone();
        for _ in 0..opts.max_list_pages {
            let page = self.list_page(&query).await?;
            let mut new_ids = 0;
            for entry in page.items {
                match index.get(entry.session_id()) {
                    Some(&i) => entries[i] = entry,
                    None => {
                        new_ids += 1;
                        index.insert(entry.session_id().to_owned(), entries.len());
                        entries.push(entry);
                    }
                }
            }
            if entries.len() > opts.max_list_items {
                return Err(FleetError::Paging {
                    route: route::LIST,
                    message: format!("more than {} entries", opts.max_list_items),
                });
            }
            if page.cursor.is_some() {
                last_cursor = page.cursor.clone();
            }
            if !page.has_next_page {
                return Ok((entries, last_cursor));
            }
            let next = page.cursor.ok_or_else(|| FleetError::Paging {
                route: route::LIST,
                message: "has_next_page without a cursor".into(),
            })?;
            match next_step(&query, &next, new_ids) {
                Next::Follow => query.cursor = Some(next),
                Next::Grow(first) => {
                    debug!(
                        route = route::LIST,
                        first, "same cursor again; asking for a larger page"
                    );
                    query.first = Some(first);
                }
                Next::Stuck => {
                    return Err(FleetError::Paging {
                        route: route::LIST,
                        message: "the server returned the same cursor and no new entries \
                                  at the largest page size"
                            .into(),
                    });
                }
            }
        }
        Err(FleetError::Paging {
            route: route::LIST,
            message: format!("more than {} pages", opts.max_list_pages),
        })
    }

    /// One entry; `None` when the server answers 404.
    pub async fn get(&self, session_id: &SessionId) -> Result<Option<QueueEntry>, FleetError> {
        let url = self.url(&["devins", &http::segment(session_id.as_str())?])?;
        let raw = self.execute(Call::get(route::GET, url)).await?;
        match raw.status {
            404 => Ok(None),
            _ if raw.is_success() => {
                let value = self.decode(route::GET, &raw.body)?;
                parse_entry(value)
                    .map(Some)
                    .map_err(|message| FleetError::Decode {
                        route: route::GET,
                        message: self.scrub(&message),
                    })
            }
            _ => Err(self.status_error(route::GET, SCOPE_MACHINE, &raw)),
        }
    }

    /// Claims `session_id` for `acceptor_id` (compare-and-swap on the
    /// server). On success the entry carries `status.connect_token`,
    /// `status.gateway_url` and `status.claim_deadline`.
    ///
    /// Not retried: after a lost response a blind retry could come back as a
    /// 409 that was really our own success. A claim with the same acceptor id
    /// is a renewal, so the caller may simply claim again after a transport
    /// error or timeout; a [`ClaimError::Conflict`] then really means someone
    /// else holds it (or the session runs with another worker).
    pub async fn claim(
        &self,
        session_id: &SessionId,
        acceptor_id: &str,
    ) -> Result<QueueEntry, ClaimError> {
        let url = self.url(&["devins", &http::segment(session_id.as_str())?, "claim"])?;
        let raw = self
            .execute(Call::post(route::CLAIM, url, acceptor_body(acceptor_id)))
            .await?;
        match raw.status {
            409 => {
                debug!(route = route::CLAIM, "claim conflict");
                Err(ClaimError::Conflict)
            }
            _ if raw.is_success() => {
                let value = self.decode(route::CLAIM, &raw.body)?;
                parse_entry(value).map_err(|message| {
                    ClaimError::Fleet(FleetError::Decode {
                        route: route::CLAIM,
                        message: self.scrub(&message),
                    })
                })
            }
            _ => Err(self.status_error(route::CLAIM, SCOPE_MACHINE, &raw).into()),
        }
    }

    /// Returns `session_id` to the queue. 409 and 404 are outcomes, not
    /// errors: either way there is nothing left to release. Not retried
    /// automatically; repeating a release is harmless, so the caller may.
    pub async fn release(
        &self,
        session_id: &SessionId,
        acceptor_id: &str,
    ) -> Result<ReleaseOutcome, FleetError> {
        let url = self.url(&["devins", &http::segment(session_id.as_str())?, "release"])?;
        let raw = self
            .execute(Call::post(route::RELEASE, url, acceptor_body(acceptor_id)))
            .await?;
        match raw.status {
            409 => Ok(ReleaseOutcome::NotHolder),
            404 => Ok(ReleaseOutcome::Gone),
            _ if raw.is_success() => Ok(ReleaseOutcome::Released),
            _ => Err(self.status_error(route::RELEASE, SCOPE_MACHINE, &raw)),
        }
    }
}

fn acceptor_body(acceptor_id: &str) -> serde_json::Value {
    serde_json::to_value(AcceptorBody {
        acceptor_id: acceptor_id.to_owned(),
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(cursor: Option<&str>, first: u32) -> ListQuery {
        let mut q = ListQuery::new("o").first(first);
        q.cursor = cursor.map(str::to_owned);
        q
    }

    #[test]
    fn paging_decisions() {
        assert_eq!(next_step(&at(None, 2), "c1", 2), Next::Follow);
        assert_eq!(next_step(&at(Some("c1"), 2), "c2", 0), Next::Follow);
        assert_eq!(next_step(&at(Some("c1"), 2), "c1", 1), Next::Grow(4));
        assert_eq!(next_step(&at(Some("c1"), 150), "c1", 0), Next::Grow(200));
        assert_eq!(next_step(&at(Some("c1"), 200), "c1", 3), Next::Follow);
        assert_eq!(next_step(&at(Some("c1"), 200), "c1", 0), Next::Stuck);
    }
}
