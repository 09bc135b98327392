//! Wire types of the fleet API, shaped like the server's JSON.
//!
//! Everything here is tolerant by design: unknown fields are ignored, enum
//! values the server adds later become an `Unknown` variant instead of a parse
//! failure, and timestamps are accepted as Unix seconds, Unix milliseconds or
//! ISO-8601. The one thing validated strictly is the session id, because it
//! later names files and URLs.

use std::fmt;

use chrono::{DateTime, TimeZone, Utc};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use common::Secret;
pub use common::{AllowRule, NetworkPolicy};

pub use crate::session_id::{InvalidEntry, MAX_SESSION_ID_LEN, SessionId, validate_session_id};

/// Declares a string enum with a catch-all `Unknown(String)` variant that
/// round-trips the server's spelling.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident (default $default:ident) { $($variant:ident => $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)+
            /// A value this client does not know; kept verbatim.
            Unknown(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $wire,)+
                    Self::Unknown(other) => other,
                }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::$default
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                match value {
                    $($wire => Self::$variant,)+
                    other => Self::Unknown(other.to_owned()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let value = Option::<String>::deserialize(d)?.unwrap_or_default();
                Ok(Self::from(value.as_str()))
            }
        }
    };
}

wire_enum!(
    /// `spec.kind`: a fresh session or the resumption of a suspended one.
    SessionKind (default New) { New => "new", Resume => "resume" }
);

wire_enum!(
    /// `spec.platform` and an outpost's platform.
    Platform (default Linux) { Linux => "linux", Macos => "macos", Windows => "windows" }
);

wire_enum!(
    /// `status.phase`: whether an acceptor holds the entry.
    Phase (default Pending) { Pending => "pending", Claimed => "claimed" }
);

wire_enum!(
    /// `status.session_status`: where the Devin session itself is. The first
    /// four are documented; the rest have been observed in the wild.
    SessionStatus (default Pending) {
        Pending => "pending",
        Running => "running",
        Suspended => "suspended",
        Terminated => "terminated",
        New => "new",
        Claimed => "claimed",
        Resuming => "resuming",
        Exit => "exit",
        Error => "error",
    }
);

wire_enum!(
    /// The `type` of a watch event.
    EventType (default Modified) { Added => "ADDED", Modified => "MODIFIED", Deleted => "DELETED" }
);

impl SessionStatus {
    /// The session is over for good or for now: its remote must not run.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Suspended | Self::Terminated)
    }
}

/// An instant on the wire. Accepts Unix seconds (integer or fractional),
/// Unix milliseconds, numeric strings and ISO-8601 / RFC 3339 strings;
/// serializes as fractional Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub DateTime<Utc>);

/// Numbers at or above this are taken as milliseconds: 1e11 seconds is the
/// year 5138, 1e11 milliseconds is 1973.
const MILLIS_THRESHOLD: f64 = 1e11;

/// Which encoding to write a timestamp in; the emulator uses this to exercise
/// all three spellings seen in the wild.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampFormat {
    #[default]
    Seconds,
    Millis,
    Iso8601,
}

impl Timestamp {
    pub fn now() -> Self {
        Self(Utc::now())
    }

    pub fn from_unix_millis(ms: i64) -> Option<Self> {
        Utc.timestamp_millis_opt(ms).single().map(Self)
    }

    pub fn unix_millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// Interprets a bare number as seconds or milliseconds by magnitude.
    pub fn from_number(n: f64) -> Option<Self> {
        if !n.is_finite() || n < 0.0 {
            return None;
        }
        let ms = if n >= MILLIS_THRESHOLD { n } else { n * 1000.0 };
        if ms > i64::MAX as f64 {
            return None;
        }
        Self::from_unix_millis(ms.round() as i64)
    }

    pub fn parse_str(s: &str) -> Option<Self> {
        let s = s.trim();
        if let Ok(n) = s.parse::<f64>() {
            return Self::from_number(n);
        }
        if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
            return Some(Self(dt.with_timezone(&Utc)));
        }
        // ISO-8601 without an offset: taken as UTC.
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
            .ok()
            .map(|n| Self(n.and_utc()))
    }

    pub fn to_json(&self, format: TimestampFormat) -> serde_json::Value {
        match format {
            TimestampFormat::Seconds => serde_json::json!(self.unix_millis() as f64 / 1000.0),
            TimestampFormat::Millis => serde_json::json!(self.unix_millis()),
            TimestampFormat::Iso8601 => {
                serde_json::json!(self.0.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            }
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.unix_millis() as f64 / 1000.0)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let parsed = match &value {
            serde_json::Value::Number(n) => n.as_f64().and_then(Timestamp::from_number),
            serde_json::Value::String(s) => Timestamp::parse_str(s),
            _ => None,
        };
        parsed.ok_or_else(|| de::Error::custom(format!("not a timestamp: {value}")))
    }
}

/// Deserializes an optional timestamp, treating an unparseable value as absent
/// rather than failing the whole entry.
fn lenient_timestamp<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
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
    pub metadata: EntryMetadata,
    #[serde(default, deserialize_with = "null_as_default")]
    pub spec: EntrySpec,
    #[serde(default, deserialize_with = "null_as_default")]
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
    pub outpost_id: String,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub created_at: Option<Timestamp>,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub updated_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EntrySpec {
    #[serde(default)]
    pub kind: SessionKind,
    /// Null on the wire means the default platform, linux.
    #[serde(default, deserialize_with = "platform_or_default")]
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_binary_sha: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub network_policy: NetworkPolicy,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EntryStatus {
    #[serde(default)]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptor_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub claim_deadline: Option<Timestamp>,
    #[serde(default)]
    pub session_status: SessionStatus,
    /// Present only in a successful claim response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_url: Option<String>,
}

/// A page of `GET /devins`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListPage {
    pub items: Vec<QueueEntry>,
    pub cursor: Option<String>,
    pub has_next_page: bool,
    pub total: Option<u64>,
    /// Items dropped because they failed validation (logged by the client).
    pub skipped: usize,
}

/// One server-sent event of a watch.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchEvent {
    pub event_type: EventType,
    pub object: QueueEntry,
    pub cursor: Option<String>,
}

/// An outpost: a named queue of sessions. The real service puts the name
/// in `spec.name` (`{metadata: {outpost_id, account_id, created_at}, spec:
/// {name, platform, description}, status}`); an older reading put it in
/// `metadata.name`, which is still accepted when `spec.name` is absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "OutpostWire")]
pub struct Outpost {
    pub metadata: OutpostMetadata,
    pub spec: OutpostSpec,
    pub status: OutpostStatus,
}

impl Outpost {
    /// The outpost's name (`spec.name`).
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutpostMetadata {
    #[serde(default, alias = "id", deserialize_with = "null_as_default")]
    pub outpost_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub created_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutpostSpec {
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// Null on the wire means the default platform, linux.
    #[serde(default, deserialize_with = "platform_or_default")]
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
pub struct OutpostStatus {
    #[serde(default)]
    pub queue_depth: u64,
    #[serde(default)]
    pub active_claims: u64,
}

/// Body of `POST /outposts`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreateOutpost {
    pub name: String,
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Body of claim and release.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcceptorBody {
    pub acceptor_id: String,
}

/// Response of `POST /outposts/connection-token`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnectionToken {
    pub outpost_id: String,
    #[serde(default)]
    pub account_id: String,
    #[serde(default)]
    pub outpost_name: String,
    #[serde(default)]
    pub service_user_id: String,
    pub api_base_url: String,
    pub access_token: Secret,
    #[serde(default)]
    pub token_type: String,
}

#[cfg(test)]
mod tests;
