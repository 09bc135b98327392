//! Wire types of the fleet API, shaped like the server's JSON.
//!
//! Everything here is tolerant by design: unknown fields are ignored, enum
//! values the server adds later become an `Unknown` variant instead of a parse
//! failure (`common::open_enum!`), and timestamps are accepted as Unix seconds, Unix milliseconds or
//! ISO-8601. The one thing validated strictly is the session id, because it
//! later names files and URLs.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};

use common::Secret;
pub use common::{AllowRule, NetworkPolicy};

pub use crate::session_id::{InvalidEntry, MAX_SESSION_ID_LEN, SessionId, validate_session_id};
use crate::timestamp::lenient_timestamp;
pub use crate::timestamp::{Timestamp, TimestampFormat};

common::open_enum!(
    /// `spec.kind`: a fresh session or the resumption of a suspended one.
    pub enum SessionKind (default New) { New = "new", Resume = "resume" }
);

common::open_enum!(
    /// `spec.platform` and an outpost's platform.
    pub enum Platform (default Linux) { Linux = "linux", Macos = "macos", Windows = "windows" }
);

common::open_enum!(
    /// `status.phase`: whether an acceptor holds the entry.
    pub enum Phase (default Pending) { Pending = "pending", Claimed = "claimed" }
);

common::open_enum!(
    /// `status.session_status`: where the Devin session itself is. The first
    /// four are documented; the rest have been observed in the wild.
    pub enum SessionStatus (default Pending) {
        Pending = "pending",
        Running = "running",
        Suspended = "suspended",
        Terminated = "terminated",
        New = "new",
        Claimed = "claimed",
        Resuming = "resuming",
        Exit = "exit",
        Error = "error",
    }
);

common::open_enum!(
    /// The `type` of a watch event.
    pub enum EventType (default Modified) { Added = "ADDED", Modified = "MODIFIED", Deleted = "DELETED" }
);

impl SessionStatus {
    /// The session is over for good or for now: its remote must not run.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Suspended | Self::Terminated)
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A platform where null, missing or empty means the default, linux (the
/// service sends null for "default"; reading it as an unknown platform
/// would make Garrison refuse a linux outpost).
fn platform_or_default<'de, D: Deserializer<'de>>(d: D) -> Result<Platform, D::Error> {
    let value = Option::<String>::deserialize(d)?;
    Ok(match value.as_deref().map(str::trim) {
        None | Some("") => Platform::Linux,
        Some(other) => Platform::from(other),
    })
}

/// One queued Devin session ("devin" in the API).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueEntry {
    /// Who the entry is and when it changed.
    pub metadata: EntryMetadata,
    #[serde(default, deserialize_with = "null_as_default")]
    /// What the session asks for.
    pub spec: EntrySpec,
    #[serde(default, deserialize_with = "null_as_default")]
    /// Where it is in the queue.
    pub status: EntryStatus,
}

impl QueueEntry {
    /// The session's id, as text.
    pub fn session_id(&self) -> &str {
        self.metadata.session_id.as_str()
    }

    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.metadata.session_id
    }

    /// Checks the fields later used to name things; see [`validate_session_id`].
    pub fn validate(&self) -> Result<(), InvalidEntry> {
        validate_session_id(self.metadata.session_id.as_str())
    }
}

/// Who an entry is and when it changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EntryMetadata {
    /// The session's id (checked as it is read: see [`SessionId`]).
    pub session_id: SessionId,
    #[serde(default, deserialize_with = "null_as_default")]
    /// The outpost whose queue holds it.
    pub outpost_id: String,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    /// When it was queued.
    pub created_at: Option<Timestamp>,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    /// When it last changed.
    pub updated_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// What a session asks of its outpost.
pub struct EntrySpec {
    #[serde(default)]
    /// New, or a resume of an earlier session.
    pub kind: SessionKind,
    /// Null on the wire means the default platform, linux.
    #[serde(default, deserialize_with = "platform_or_default")]
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The `devin-remote` build pinned for it, if any.
    pub remote_binary_sha: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    /// What the sandbox may reach.
    pub network_policy: NetworkPolicy,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// Where an entry is in the queue.
pub struct EntryStatus {
    #[serde(default)]
    /// Pending, claimed, ...
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Who holds the claim, if anyone.
    pub acceptor_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    /// When the claim expires, on the server's clock.
    pub claim_deadline: Option<Timestamp>,
    #[serde(default)]
    /// The Devin session's own status.
    pub session_status: SessionStatus,
    /// Present only in a successful claim response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The gateway the remote dials, when the claim names one.
    pub gateway_url: Option<String>,
}

/// A page of `GET /devins`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    /// The entries of this page.
    pub items: Vec<QueueEntry>,
    /// Where the next page starts.
    pub cursor: Option<String>,
    /// Whether another page follows.
    pub has_next_page: bool,
    /// How many entries match, when the server says.
    pub total: Option<u64>,
    /// Items dropped because they failed validation (logged by the client).
    pub skipped: usize,
}

/// One server-sent event of a watch.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    /// Added, modified or deleted.
    pub event_type: EventType,
    /// The entry as it is now (as it was, for a delete).
    pub object: QueueEntry,
    /// Where to resume the watch after this event.
    pub cursor: Option<String>,
}

/// An outpost: a named queue of sessions. The real service puts the name
/// in `spec.name` (`{metadata: {outpost_id, account_id, created_at}, spec:
/// {name, platform, description}, status}`); an older reading put it in
/// `metadata.name`, which is still accepted when `spec.name` is absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "OutpostWire")]
pub struct Outpost {
    /// Who the outpost is.
    pub metadata: OutpostMetadata,
    /// What it is.
    pub spec: OutpostSpec,
    /// How busy its queue is.
    pub status: OutpostStatus,
}

impl Outpost {
    /// The outpost's name (`spec.name`).
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// Who an outpost is.
pub struct OutpostMetadata {
    #[serde(default, alias = "id", deserialize_with = "null_as_default")]
    /// The outpost's id.
    pub outpost_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The account that owns it.
    pub account_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    /// When it was made.
    pub created_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// What an outpost is.
pub struct OutpostSpec {
    #[serde(default, deserialize_with = "null_as_default")]
    /// Its name.
    pub name: String,
    /// Null on the wire means the default platform, linux.
    #[serde(default, deserialize_with = "platform_or_default")]
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What it is for, if said.
    pub description: Option<String>,
}

/// How an outpost is read: the current shape plus the legacy
/// `metadata.name`, folded into `spec.name` when that is empty.
#[derive(Deserialize)]
struct OutpostWire {
    #[serde(default, deserialize_with = "null_as_default")]
    metadata: OutpostMetadataWire,
    #[serde(default, deserialize_with = "null_as_default")]
    spec: OutpostSpec,
    #[serde(default, deserialize_with = "null_as_default")]
    status: OutpostStatus,
}

#[derive(Default, Deserialize)]
struct OutpostMetadataWire {
    #[serde(flatten)]
    current: OutpostMetadata,
    #[serde(default)]
    name: Option<String>,
}

impl From<OutpostWire> for Outpost {
    fn from(w: OutpostWire) -> Self {
        let mut spec = w.spec;
        if spec.name.is_empty()
            && let Some(legacy) = w.metadata.name
        {
            spec.name = legacy;
        }
        Outpost {
            metadata: w.metadata.current,
            spec,
            status: w.status,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// An outpost's queue, counted.
pub struct OutpostStatus {
    #[serde(default)]
    /// Sessions waiting.
    pub queue_depth: u64,
    #[serde(default)]
    /// Sessions claimed.
    pub active_claims: u64,
}

/// Body of `POST /outposts`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateOutpost {
    /// Its name.
    pub name: String,
    /// The platform its sessions run on.
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What it is for.
    pub description: Option<String>,
}

/// Body of claim and release.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcceptorBody {
    /// Who claims or releases.
    pub acceptor_id: String,
}

/// Response of `POST /outposts/connection-token`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnectionToken {
    /// The outpost connected.
    pub outpost_id: String,
    #[serde(default)]
    /// The account that owns it.
    pub account_id: String,
    #[serde(default)]
    /// The outpost's name.
    pub outpost_name: String,
    #[serde(default)]
    /// The service user the token acts as.
    pub service_user_id: String,
    /// The API base the token is for.
    pub api_base_url: String,
    /// The token.
    pub access_token: Secret,
    #[serde(default)]
    /// Its type (`Bearer`).
    pub token_type: String,
}

#[cfg(test)]
mod tests;
