//! Times as the service sends them. The official models leave them untyped
//! and read Unix seconds (often with a fraction), milliseconds,
//! microseconds or ISO 8601 strings; a number's unit is told by its size,
//! as the SDK does.

use serde::Deserialize;

/// A time from the service, kept as sent; read it with
/// [`Timestamp::unix_ms`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub serde_json::Value);

impl Timestamp {
    /// Milliseconds since the Unix epoch, `None` when it is not a time.
    pub fn unix_ms(&self) -> Option<i64> {
        unix_ms(&self.0)
    }
}

/// Above this a number is in microseconds (the SDK's rule).
const MICROS_ABOVE: f64 = 1e15;
/// Above this (and not microseconds) a number is in milliseconds.
const MILLIS_ABOVE: f64 = 1e12;

/// Milliseconds since the Unix epoch of a number or a string in any of the
/// service's forms.
pub(crate) fn unix_ms(value: &serde_json::Value) -> Option<i64> {
    match value {
        serde_json::Value::Number(n) => number_ms(n.as_f64()?),
        serde_json::Value::String(s) => {
            let s = s.trim();
            match s.parse::<f64>() {
                Ok(n) => number_ms(n),
                Err(_) => iso_ms(s),
            }
        }
        _ => None,
    }
}

fn number_ms(n: f64) -> Option<i64> {
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let ms = if n > MICROS_ABOVE {
        n / 1000.0
    } else if n > MILLIS_ABOVE {
        n
    } else {
        n * 1000.0
    };
    (ms < i64::MAX as f64).then_some(ms as i64)
}

fn iso_ms(s: &str) -> Option<i64> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(at.timestamp_millis());
    }
    // Without an offset the service means UTC.
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|at| at.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_form_the_service_sends_is_read_in_milliseconds() {
        let ms = 1_796_145_133_151_i64;
        assert_eq!(unix_ms(&json!(1_796_145_133.151)), Some(ms));
        assert_eq!(unix_ms(&json!(1_796_145_133)), Some(ms - 151));
        assert_eq!(unix_ms(&json!(ms)), Some(ms));
        assert_eq!(unix_ms(&json!(ms * 1000 + 7)), Some(ms));
        assert_eq!(unix_ms(&json!("1796145133.151")), Some(ms));
        assert_eq!(
            unix_ms(&json!("2026-12-01T16:58:10.5Z")),
            Some(1_796_144_290_500)
        );
        assert_eq!(
            unix_ms(&json!("2026-12-01T17:58:10.5+01:00")),
            Some(1_796_144_290_500)
        );
        assert_eq!(
            unix_ms(&json!("2026-12-01T16:58:10.5")),
            Some(1_796_144_290_500)
        );
    }

    #[test]
    fn what_is_not_a_time_is_none() {
        for v in [
            json!(null),
            json!("soon"),
            json!(-1),
            json!(true),
            json!({}),
        ] {
            assert_eq!(unix_ms(&v), None, "{v}");
        }
    }

    #[test]
    fn a_process_with_a_float_start_decodes() {
        let info: crate::models::ProcessInfo = serde_json::from_value(json!({
            "pid": 7, "status": "running", "command": "sleep",
            "started_at": 1_796_145_133.151,
        }))
        .unwrap();
        assert_eq!(info.started_at.unwrap().unix_ms(), Some(1_796_145_133_151));
    }
}
