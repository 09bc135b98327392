//! How queue rows and outposts are rendered for the wire: the configured
//! spelling of `claim_deadline`, and the faults that change what a read
//! shows (null platforms, whole-second timestamps, transient suspension).

use fleet::{Platform, QueueEntry, SessionStatus};
use serde_json::{Value, json};

use crate::faults;
use crate::shared::Shared;

/// Renders a row for the wire: `claim_deadline` in the configured spelling
/// and, for reads, the transient-suspended fault.
pub(crate) fn entry_json(shared: &Shared, entry: &QueueEntry, read: bool) -> Value {
    let mut v = serde_json::to_value(entry).unwrap_or(Value::Null);
    null_platform(shared, &mut v, &entry.spec.platform);
    let whole_seconds = shared.faults().whole_second_timestamps;
    if let Some(deadline) = entry.status.claim_deadline {
        v["status"]["claim_deadline"] = if whole_seconds {
            json!(deadline.unix_millis().div_euclid(1000))
        } else {
            deadline.to_json(shared.config.deadline_format)
        };
    }
    if whole_seconds {
        for field in ["created_at", "updated_at"] {
            if let Some(secs) = v["metadata"][field].as_f64() {
                v["metadata"][field] = json!(secs.floor() as i64);
            }
        }
    }
    if read
        && entry.status.session_status == SessionStatus::Running
        && faults::roll(shared.faults().transient_suspended_rate)
    {
        v["status"]["session_status"] = json!("suspended");
    }
    v
}

/// Renders an outpost for the wire (see [`null_platform`]).
pub(crate) fn outpost_json(shared: &Shared, outpost: &fleet::Outpost) -> Value {
    let mut v = serde_json::to_value(outpost).unwrap_or(Value::Null);
    null_platform(shared, &mut v, &outpost.spec.platform);
    v
}

/// The service sends `platform: null` for "the default" (linux); on
/// demand the emulator does too, so clients are tested against it.
fn null_platform(shared: &Shared, v: &mut Value, platform: &Platform) {
    if shared.faults().null_platform && *platform == Platform::Linux {
        v["spec"]["platform"] = Value::Null;
    }
}
