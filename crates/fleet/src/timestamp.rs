//! Instants on the wire: [`Timestamp`] reads every spelling the service
//! and its clients have used and writes the one asked for.

use chrono::{DateTime, TimeZone, Utc};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

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
    /// Unix seconds.
    #[default]
    Seconds,
    /// Unix milliseconds.
    Millis,
    /// ISO-8601 text.
    Iso8601,
}

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        Self(Utc::now())
    }

    /// The time `ms` milliseconds after the Unix epoch; `None` when out of range.
    pub fn from_unix_millis(ms: i64) -> Option<Self> {
        Utc.timestamp_millis_opt(ms).single().map(Self)
    }

    /// Milliseconds since the Unix epoch.
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

    /// Reads any of the three spellings from text; `None` when it is none of them.
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

    /// The time as JSON, in `format`.
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
pub(crate) fn lenient_timestamp<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Timestamp>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}
