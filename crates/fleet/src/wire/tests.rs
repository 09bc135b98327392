//! The wire types read leniently: unknown values kept, timestamps in every
//! spelling, session ids checked.

use super::*;
use serde_json::json;

fn entry(status: serde_json::Value) -> QueueEntry {
    serde_json::from_value(json!({
        "metadata": {"session_id": "devin-1", "outpost_id": "outpost_env-1"},
        "spec": {"kind": "new", "platform": "linux"},
        "status": status,
    }))
    .unwrap()
}

#[test]
fn deadline_in_all_three_formats_is_the_same_instant() {
    let secs = entry(json!({"claim_deadline": 1_700_000_000}));
    let frac = entry(json!({"claim_deadline": 1_700_000_000.0}));
    let millis = entry(json!({"claim_deadline": 1_700_000_000_000u64}));
    let iso = entry(json!({"claim_deadline": "2023-11-14T22:13:20Z"}));
    let iso_offset = entry(json!({"claim_deadline": "2023-11-14T23:13:20+01:00"}));
    let iso_naive = entry(json!({"claim_deadline": "2023-11-14T22:13:20"}));
    let want = Timestamp::from_unix_millis(1_700_000_000_000);
    for e in [secs, frac, millis, iso, iso_offset, iso_naive] {
        assert_eq!(e.status.claim_deadline, want);
    }
}

#[test]
fn fractional_seconds_keep_millisecond_precision() {
    let e = entry(json!({"claim_deadline": 1_700_000_000.25}));
    assert_eq!(
        e.status.claim_deadline.unwrap().unix_millis(),
        1_700_000_000_250
    );
}

#[test]
fn timestamp_json_round_trips_in_each_format() {
    let t = Timestamp::from_unix_millis(1_700_000_000_500).unwrap();
    for format in [
        TimestampFormat::Seconds,
        TimestampFormat::Millis,
        TimestampFormat::Iso8601,
    ] {
        let back: Timestamp = serde_json::from_value(t.to_json(format)).unwrap();
        assert_eq!(back, t, "{format:?}");
    }
}

#[test]
fn garbage_deadline_is_absent_not_an_error() {
    let e = entry(json!({"claim_deadline": "soon"}));
    assert_eq!(e.status.claim_deadline, None);
    let e = entry(json!({"claim_deadline": -5}));
    assert_eq!(e.status.claim_deadline, None);
}

#[test]
fn unknown_enum_values_are_kept_not_rejected() {
    let e: QueueEntry = serde_json::from_value(json!({
        "metadata": {"session_id": "devin-1", "outpost_id": "o", "future_field": 1},
        "spec": {"kind": "fork", "platform": "plan9"},
        "status": {"phase": "frozen", "session_status": "hibernating"},
        "extra": {"anything": true},
    }))
    .unwrap();
    assert_eq!(e.spec.kind, SessionKind::Unknown("fork".into()));
    assert_eq!(e.spec.platform, Platform::Unknown("plan9".into()));
    assert_eq!(e.status.phase, Phase::Unknown("frozen".into()));
    assert_eq!(
        e.status.session_status,
        SessionStatus::Unknown("hibernating".into())
    );
    assert_eq!(
        serde_json::to_value(&e.status.session_status).unwrap(),
        json!("hibernating")
    );
}

#[test]
fn observed_statuses_are_known() {
    for s in ["new", "claimed", "resuming", "exit", "error"] {
        assert!(
            !matches!(SessionStatus::from(s), SessionStatus::Unknown(_)),
            "{s}"
        );
    }
}

#[test]
fn nulls_and_missing_blocks_take_defaults() {
    let e: QueueEntry = serde_json::from_value(json!({
        "metadata": {"session_id": "devin-1", "outpost_id": null},
        "spec": {"remote_binary_sha": null, "network_policy": null, "kind": null},
        "status": null,
    }))
    .unwrap();
    assert_eq!(e.spec.kind, SessionKind::Unknown(String::new()));
    assert_eq!(e.spec.network_policy, NetworkPolicy::default());
    assert_eq!(e.status.phase, Phase::Pending);
}

#[test]
fn network_policy_rules_parse_and_unknown_shapes_survive() {
    let p: NetworkPolicy = serde_json::from_value(json!({
        "enabled": true,
        "allow": [
            {"hostname": "*.github.com"},
            {"ipv4": "10.0.0.0/8"},
            {"ipv6": "fd00::/8"},
            {"port": 22},
        ],
    }))
    .unwrap();
    assert!(p.enabled);
    assert_eq!(p.allow[0], AllowRule::Hostname("*.github.com".into()));
    assert_eq!(p.allow[1], AllowRule::Ipv4("10.0.0.0/8".into()));
    assert_eq!(p.allow[2], AllowRule::Ipv6("fd00::/8".into()));
    assert_eq!(p.allow[3], AllowRule::Unknown(json!({"port": 22})));
    let back: NetworkPolicy = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
    assert_eq!(back, p);
}

#[test]
fn connect_token_is_redacted_in_debug() {
    let e = entry(json!({"connect_token": "ct_secret_value", "gateway_url": "wss://g"}));
    assert!(!format!("{e:?}").contains("ct_secret_value"));
    assert_eq!(e.status.connect_token.unwrap().expose(), "ct_secret_value");
}

#[test]
fn outpost_accepts_id_alias() {
    let o: Outpost = serde_json::from_value(json!({
        "metadata": {"id": "outpost_env-9", "name": "lab"},
        "status": {"queue_depth": 3, "active_claims": 1}
    }))
    .unwrap();
    assert_eq!(o.metadata.outpost_id, "outpost_env-9");
    assert_eq!(o.status.queue_depth, 3);
}

/// Protocol page, fleet API, outposts row: the name is `spec.name`, the
/// metadata has `account_id`, and a null platform means linux.
#[test]
fn outpost_reads_the_real_shape() {
    let o: Outpost = serde_json::from_value(json!({
        "metadata": {"outpost_id": "outpost_env-1", "account_id": "acc_1", "created_at": 1_700_000_000},
        "spec": {"name": "lab", "platform": null, "description": null},
        "status": {"queue_depth": 2, "active_claims": 1}
    }))
    .unwrap();
    assert_eq!(o.name(), "lab");
    assert_eq!(o.spec.name, "lab");
    assert_eq!(o.metadata.account_id.as_deref(), Some("acc_1"));
    assert_eq!(o.spec.platform, Platform::Linux);
    let back = serde_json::to_value(&o).unwrap();
    assert_eq!(back["spec"]["name"], json!("lab"));
    assert_eq!(back["metadata"]["account_id"], json!("acc_1"));
}

#[test]
fn outpost_still_reads_a_legacy_metadata_name() {
    let o: Outpost = serde_json::from_value(json!({
        "metadata": {"outpost_id": "outpost_env-1", "name": "old"},
        "spec": {"platform": "linux"},
    }))
    .unwrap();
    assert_eq!(o.name(), "old");
}

/// A null or missing platform is the default, linux, on entries too.
#[test]
fn null_platform_is_linux() {
    let e: QueueEntry = serde_json::from_value(json!({
        "metadata": {"session_id": "devin-1", "outpost_id": "o"},
        "spec": {"kind": "new", "platform": null},
    }))
    .unwrap();
    assert_eq!(e.spec.platform, Platform::Linux);
    let o: Outpost = serde_json::from_value(json!({
        "metadata": {"outpost_id": "o"}, "spec": {"name": "n"}
    }))
    .unwrap();
    assert_eq!(o.spec.platform, Platform::Linux);
}

#[test]
fn session_id_validation() {
    assert!(validate_session_id("devin-abc").is_ok());
    assert!(
        validate_session_id("../../etc").is_ok(),
        "hashed before use, so allowed here"
    );
    assert_eq!(validate_session_id(""), Err(InvalidEntry::EmptySessionId));
    assert!(matches!(
        validate_session_id(&"a".repeat(10_000)),
        Err(InvalidEntry::SessionIdTooLong(10_000))
    ));
    assert_eq!(
        validate_session_id("a\nb"),
        Err(InvalidEntry::SessionIdControlChar)
    );
}
