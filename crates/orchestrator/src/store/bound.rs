//! The size bound on text the store (and the session's `events.log`)
//! keeps: an error or an event's detail can carry what a helper or a
//! sandbox said, so each is clipped before it is written, whoever made it.

use sandbox::bounded_output::{ERROR_MAX, clip};
use serde_json::Value;

/// Bytes of one string in an event's detail, at most.
pub(crate) const DETAIL_STRING_MAX: usize = 4 << 10;
/// Bytes of an event's whole detail, encoded, at most.
pub(crate) const DETAIL_MAX: usize = 16 << 10;

/// `error` clipped to [`ERROR_MAX`].
pub(crate) fn error_text(error: &str) -> String {
    clip(error, ERROR_MAX).into_owned()
}

/// `detail` with every string clipped to [`DETAIL_STRING_MAX`]; one still
/// larger than [`DETAIL_MAX`] (many strings) becomes its clipped encoding
/// under `"clipped"`.
pub(crate) fn detail(detail: &Value) -> Value {
    let clipped = clip_strings(detail);
    let encoded = clipped.to_string();
    if encoded.len() <= DETAIL_MAX {
        clipped
    } else {
        serde_json::json!({ "clipped": clip(&encoded, DETAIL_MAX).into_owned() })
    }
}

fn clip_strings(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(clip(s, DETAIL_STRING_MAX).into_owned()),
        Value::Array(items) => Value::Array(items.iter().map(clip_strings).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (clip(k, DETAIL_STRING_MAX).into_owned(), clip_strings(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_strings_and_large_details_are_clipped() {
        let huge = "x".repeat(1 << 20);
        let one = detail(&serde_json::json!({ "error": huge, "attempt": 1 }));
        assert!(one.to_string().len() < DETAIL_STRING_MAX + 200);
        assert_eq!(one["attempt"], 1);
        let many: Vec<String> = (0..100).map(|_| "y".repeat(4000)).collect();
        let all = detail(&serde_json::json!({ "errors": many }));
        assert!(
            all.to_string().len() < DETAIL_MAX + 200,
            "{}",
            all.to_string().len()
        );
        let small = serde_json::json!({ "a": "b" });
        assert_eq!(detail(&small), small);
        assert!(error_text(&huge).len() < ERROR_MAX + 100);
    }
}
