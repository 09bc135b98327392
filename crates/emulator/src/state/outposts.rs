//! Outposts: creating, finding, listing and deleting them, and rendering one
//! with its queue depth and active claims counted from the rows.

use fleet::{Outpost, OutpostMetadata, OutpostSpec, OutpostStatus, Phase, Platform};

use super::auth::ACCOUNT_ID;
use super::{State, StateError, random_hex, ts};

#[derive(Clone, Debug)]
pub(crate) struct OutpostRec {
    pub id: String,
    pub name: String,
    pub platform: Platform,
    pub description: Option<String>,
    pub created_ms: i64,
}

impl State {
    pub(crate) fn create_outpost(
        &mut self,
        name: &str,
        platform: Platform,
        description: Option<String>,
        now: i64,
    ) -> String {
        let id = format!("outpost_env-{}", random_hex(12));
        self.outposts.push(OutpostRec {
            id: id.clone(),
            name: name.to_owned(),
            platform,
            description,
            created_ms: now,
        });
        id
    }

    pub(crate) fn outpost_rec(&self, id: &str) -> Option<&OutpostRec> {
        self.outposts.iter().find(|o| o.id == id)
    }

    pub(crate) fn outpost_by_name(&self, name: &str) -> Option<&OutpostRec> {
        self.outposts.iter().find(|o| o.name == name)
    }

    pub(crate) fn render_outpost(&self, rec: &OutpostRec) -> Outpost {
        let rows = self.entries.values().filter(|e| e.outpost_id == rec.id);
        let (mut pending, mut claimed) = (0, 0);
        for e in rows {
            match e.phase {
                Phase::Pending => pending += 1,
                Phase::Claimed => claimed += 1,
                Phase::Unknown(_) => {}
            }
        }
        Outpost {
            metadata: OutpostMetadata {
                outpost_id: rec.id.clone(),
                account_id: Some(ACCOUNT_ID.to_owned()),
                created_at: ts(rec.created_ms),
            },
            // The real service keeps the name in the spec, not the metadata.
            spec: OutpostSpec {
                name: rec.name.clone(),
                platform: rec.platform.clone(),
                description: rec.description.clone(),
            },
            status: OutpostStatus {
                queue_depth: pending,
                active_claims: claimed,
            },
        }
    }

    pub(crate) fn outpost(&self, id: &str) -> Option<Outpost> {
        self.outpost_rec(id).map(|r| self.render_outpost(r))
    }

    /// Outposts in creation order after the one with id `after`.
    pub(crate) fn list_outposts(
        &self,
        first: usize,
        after: Option<&str>,
    ) -> Result<(Vec<Outpost>, Option<String>, bool), StateError> {
        let start = match after {
            None => 0,
            Some(id) => {
                self.outposts
                    .iter()
                    .position(|o| o.id == id)
                    .ok_or_else(|| StateError::Invalid("unknown cursor".into()))?
                    + 1
            }
        };
        let rest = &self.outposts[start.min(self.outposts.len())..];
        let page: Vec<Outpost> = rest
            .iter()
            .take(first)
            .map(|r| self.render_outpost(r))
            .collect();
        let end = page.last().map(|o| o.metadata.outpost_id.clone());
        Ok((page, end, rest.len() > first))
    }

    /// Deletes an outpost and its queue rows (each with a DELETED event).
    pub(crate) fn delete_outpost(&mut self, id: &str, now: i64) -> Result<(), StateError> {
        let pos = self
            .outposts
            .iter()
            .position(|o| o.id == id)
            .ok_or_else(|| StateError::NotFound("outpost".into()))?;
        self.outposts.remove(pos);
        let rows: Vec<String> = self
            .entries
            .values()
            .filter(|e| e.outpost_id == id)
            .map(|e| e.session_id.clone())
            .collect();
        for session_id in rows {
            self.remove_entry(&session_id, now);
        }
        Ok(())
    }
}
