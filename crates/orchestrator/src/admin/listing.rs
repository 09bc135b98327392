//! Which sessions one page of `GET /api/session-page` holds: the query's
//! parameters, checked, and the pure selection over the store's records.
//!
//! A page is bounded ([`MAX_LIMIT`] rows at most, [`DEFAULT_LIMIT`] when
//! not asked), so the dashboard and the CLI never move every session in one
//! answer, however many the store holds. Parameters (all optional; an empty
//! value counts as not given):
//!
//! | parameter | meaning |
//! | --- | --- |
//! | `offset` | matching rows to skip (default 0) |
//! | `limit` | rows in the page, 1 to [`MAX_LIMIT`] (default [`DEFAULT_LIMIT`]) |
//! | `stage` | stage labels, comma-separated (`running,starting`) |
//! | `status` | `active` (not done) or `done` (`suspended` included) |
//! | `q` | part of the session id, any case (at most [`MAX_SEARCH_CHARS`] characters) |
//!
//! Rows come newest claim first (ties by session id), as `/api/sessions`
//! lists them. Anything else in the query string is refused, so a typo
//! does not silently show every session.

use std::collections::BTreeMap;

use crate::planner::StageLabel;
use crate::store::SessionRecord;

/// Rows in a page when the request names no `limit`.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// The most rows one page holds.
pub const MAX_LIMIT: usize = 500;
/// The longest `q` accepted.
pub(crate) const MAX_SEARCH_CHARS: usize = 128;

const PARAMETERS: &str = "offset, limit, stage, status, q";

/// The `status` filter: a coarser cut than the stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatusFilter {
    /// Not done: held by this Garrison now.
    Active,
    /// Done here, `suspended` included.
    Done,
}

/// One request's page and filter, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionQuery {
    /// Rows to skip.
    pub offset: usize,
    /// Rows to return at most.
    pub limit: usize,
    /// Any of these stages; empty: any stage.
    pub stages: Vec<StageLabel>,
    /// Only sessions in this state.
    pub status: Option<StatusFilter>,
    /// Lowercased; a row matches when its lowercased id contains it.
    pub search: Option<String>,
}

impl Default for SessionQuery {
    fn default() -> Self {
        Self {
            offset: 0,
            limit: DEFAULT_LIMIT,
            stages: Vec::new(),
            status: None,
            search: None,
        }
    }
}

impl SessionQuery {
    /// Reads a query string (without the `?`); the error says which
    /// parameter was wrong and what it accepts.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        let mut query = Self::default();
        let mut seen: Vec<String> = Vec::new();
        for (name, value) in url::form_urlencoded::parse(raw.as_bytes()) {
            if seen.iter().any(|s| *s == name) {
                return Err(format!("{name} is given more than once"));
            }
            seen.push(name.to_string());
            let value = value.trim();
            if value.is_empty() && is_known(&name) {
                continue;
            }
            match &*name {
                "offset" => query.offset = whole_number("offset", value)?,
                "limit" => {
                    let limit = whole_number("limit", value)?;
                    if !(1..=MAX_LIMIT).contains(&limit) {
                        return Err(format!(
                            "limit must be between 1 and {MAX_LIMIT}, not {limit}"
                        ));
                    }
                    query.limit = limit;
                }
                "stage" => query.stages = stages(value)?,
                "status" => {
                    query.status = Some(match value {
                        "active" => StatusFilter::Active,
                        "done" => StatusFilter::Done,
                        other => {
                            return Err(format!(
                                "status must be active or done, not {:?}",
                                shorten(other)
                            ));
                        }
                    })
                }
                "q" => {
                    if value.chars().count() > MAX_SEARCH_CHARS {
                        return Err(format!("q must be at most {MAX_SEARCH_CHARS} characters"));
                    }
                    query.search = Some(value.to_lowercase());
                }
                other => {
                    return Err(format!(
                        "unknown parameter {:?} (known: {PARAMETERS})",
                        shorten(other)
                    ));
                }
            }
        }
        Ok(query)
    }

    /// Whether the filter keeps a session with this id and stage.
    pub(crate) fn matches(&self, session_id: &str, stage: StageLabel) -> bool {
        if !self.stages.is_empty() && !self.stages.contains(&stage) {
            return false;
        }
        match self.status {
            Some(StatusFilter::Active) if stage.is_done() => return false,
            Some(StatusFilter::Done) if !stage.is_done() => return false,
            _ => {}
        }
        match &self.search {
            Some(part) => session_id.to_lowercase().contains(part.as_str()),
            None => true,
        }
    }
}

fn is_known(name: &str) -> bool {
    matches!(name, "offset" | "limit" | "stage" | "status" | "q")
}

/// At most 40 characters of a value quoted back in an error.
fn shorten(text: &str) -> String {
    text.chars().take(40).collect()
}

fn whole_number(name: &str, value: &str) -> Result<usize, String> {
    value
        .parse()
        .map_err(|_| format!("{name} must be a whole number, not {:?}", shorten(value)))
}

fn stages(value: &str) -> Result<Vec<StageLabel>, String> {
    let mut stages = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some(stage) = StageLabel::parse(part) else {
            let known: Vec<&str> = StageLabel::ALL.iter().map(|s| s.as_str()).collect();
            return Err(format!(
                "stage {:?} is not a stage (known: {})",
                shorten(part),
                known.join(", ")
            ));
        };
        if !stages.contains(&stage) {
            stages.push(stage);
        }
    }
    Ok(stages)
}

/// One page of records and the counts around it.
#[derive(Debug, PartialEq)]
pub(crate) struct Selection<'a> {
    /// The page's rows, newest claim first.
    pub rows: Vec<&'a SessionRecord>,
    /// Rows the filter keeps, on every page.
    pub matched: usize,
    /// Every record.
    pub total: usize,
    /// Every record by stage label, filter or not.
    pub counts: BTreeMap<String, u64>,
}

/// The page `query` asks for out of `records` (in any order).
pub(crate) fn select<'a>(records: &'a [SessionRecord], query: &SessionQuery) -> Selection<'a> {
    let mut counts = BTreeMap::<String, u64>::new();
    let mut kept: Vec<&SessionRecord> = Vec::new();
    for rec in records {
        let stage = rec.stage.label();
        *counts.entry(stage.as_str().to_owned()).or_default() += 1;
        if query.matches(rec.session_id.as_str(), stage) {
            kept.push(rec);
        }
    }
    kept.sort_by(|a, b| {
        b.claimed_at
            .cmp(&a.claimed_at)
            .then_with(|| a.session_id.cmp(&b.session_id))
    });
    let matched = kept.len();
    let rows = kept
        .into_iter()
        .skip(query.offset)
        .take(query.limit)
        .collect();
    Selection {
        rows,
        matched,
        total: records.len(),
        counts,
    }
}

#[cfg(test)]
mod tests;
