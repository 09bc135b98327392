//! Lenient reading of what the queue routes return: one entry parsed and
//! validated (a bad one is a loggable reason, not a failed call) and a list
//! page whatever spelling of cursor the server used. Shared by the queue
//! calls, the watch and the outposts list.

use crate::error::FleetError;
use crate::wire::QueueEntry;

/// Parses and validates one queue entry; the error is a loggable reason.
pub(crate) fn parse_entry(value: serde_json::Value) -> Result<QueueEntry, String> {
    let entry: QueueEntry = serde_json::from_value(value).map_err(|e| e.to_string())?;
    entry.validate().map_err(|e| e.to_string())?;
    Ok(entry)
}

/// A list response, read leniently: `cursor` or `end_cursor`, string or
/// number; missing `items` is an empty page.
pub(crate) struct RawPage {
    pub(crate) items: Vec<serde_json::Value>,
    pub(crate) cursor: Option<String>,
    pub(crate) has_next_page: bool,
    pub(crate) total: Option<u64>,
}

impl RawPage {
    pub(crate) fn from_value(
        route: &'static str,
        value: &serde_json::Value,
    ) -> Result<Self, FleetError> {
        let obj = value.as_object().ok_or_else(|| FleetError::Decode {
            route,
            message: "a list response must be a JSON object".into(),
        })?;
        let items = match obj.get("items") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Array(items)) => items.clone(),
            Some(_) => {
                return Err(FleetError::Decode {
                    route,
                    message: "`items` is not an array".into(),
                });
            }
        };
        let cursor = ["cursor", "end_cursor"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(cursor_string));
        Ok(Self {
            items,
            cursor,
            has_next_page: obj
                .get("has_next_page")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            total: obj.get("total").and_then(|v| v.as_u64()),
        })
    }
}

/// A cursor is opaque; accept a string or a number, ignore anything else.
pub(crate) fn cursor_string(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn raw_page_accepts_both_cursor_spellings() {
        let p = RawPage::from_value(
            "r",
            &json!({"items": [], "end_cursor": "e", "has_next_page": true}),
        )
        .unwrap();
        assert_eq!(p.cursor.as_deref(), Some("e"));
        assert!(p.has_next_page);
        let p =
            RawPage::from_value("r", &json!({"items": null, "cursor": 17, "total": 3})).unwrap();
        assert_eq!(p.cursor.as_deref(), Some("17"));
        assert_eq!(p.total, Some(3));
        assert!(!p.has_next_page);
        assert!(RawPage::from_value("r", &json!([])).is_err());
        assert!(RawPage::from_value("r", &json!({"items": {}})).is_err());
    }
}
