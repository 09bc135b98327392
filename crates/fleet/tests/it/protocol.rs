//! Conformance: each documented behaviour of the fleet API, point by point,
//! with the emulator (answering as the real service does, per Cognition's
//! reference model) and the client exercised together. The comment above
//! each test names the section of the protocol page it checks
//! (`shared/docs/outposts-protocol.md`, beside the repository). Everything
//! talks to 127.0.0.1 only.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{HANG, env, next, sid};
use emulator::{EmulatorConfig, Faults};
use fleet::{
    ClaimError, EventType, FleetError, ListQuery, Outpost, Platform, QueueEntry, ReleaseOutcome,
    SessionStatus, TimestampFormat, WatchItem,
};
use futures::StreamExt;

/// "Fleet API", `GET /devins`: pages are keyset-ordered by
/// `(updated_at, id)` with a `>=` boundary, so the item on a page boundary
/// repeats; `list_all` upserts by session id.
#[tokio::test]
async fn list_pages_repeat_the_boundary_item_and_list_all_upserts() {
    let env = env(EmulatorConfig::default()).await;
    let ids: Vec<String> = (0..5).map(|_| env.session(None)).collect();
    let p1 = env
        .client
        .list_page(&ListQuery::new(&env.outpost).first(2))
        .await
        .unwrap();
    assert!(p1.has_next_page);
    let p2 = env
        .client
        .list_page(
            &ListQuery::new(&env.outpost)
                .first(2)
                .cursor(p1.cursor.unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(p2.items[0].session_id(), p1.items[1].session_id());
    let (all, _) = env
        .client
        .list_all_from(ListQuery::new(&env.outpost).first(2))
        .await
        .unwrap();
    let got: Vec<&str> = all.iter().map(QueueEntry::session_id).collect();
    assert_eq!(got, ids.iter().map(String::as_str).collect::<Vec<_>>());
}

/// "Fleet API", `GET /devins`: order is `updated_at`, not insertion.
#[tokio::test]
async fn list_orders_by_updated_at() {
    let env = env(EmulatorConfig::default()).await;
    let a = env.session(None);
    let b = env.session(None);
    env.client.claim(&sid(&a), "w1").await.unwrap();
    let (all, _) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    let got: Vec<&str> = all.iter().map(QueueEntry::session_id).collect();
    assert_eq!(got, [b.as_str(), a.as_str()]);
}

/// "Fleet API", `GET /devins`: list and watch cursors are interchangeable.
#[tokio::test]
async fn list_and_watch_cursors_are_interchangeable() {
    let env = env(EmulatorConfig::default()).await;
    let ids: Vec<String> = (0..3).map(|_| env.session(None)).collect();
    // A page cursor starts a watch at that row (again: at-least-once).
    let p1 = env
        .client
        .list_page(&ListQuery::new(&env.outpost).first(2))
        .await
        .unwrap();
    let mut watch = env.client.watch(&env.outpost, p1.cursor.as_deref());
    let first = tokio::time::timeout(HANG, watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.object.session_id(), ids[1]);
    // And that event's cursor pages a list.
    let page = env
        .client
        .list_page(&ListQuery::new(&env.outpost).cursor(first.cursor.unwrap()))
        .await
        .unwrap();
    let got: Vec<&str> = page.items.iter().map(QueueEntry::session_id).collect();
    assert_eq!(got, [ids[1].as_str(), ids[2].as_str()]);
}

/// "Fleet API", watch: delivery is at-least-once; a repeated event is an
/// upsert, never an error.
#[tokio::test]
async fn duplicated_watch_events_are_delivered_and_harmless() {
    let env = env(EmulatorConfig {
        faults: Faults {
            duplicate_event_rate: 1.0,
            ..Faults::default()
        },
        ..EmulatorConfig::default()
    })
    .await;
    let (_, cursor) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    let mut watch = env.client.watch(&env.outpost, cursor.as_deref());
    let id = env.session(None);
    for _ in 0..2 {
        let e = tokio::time::timeout(HANG, watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(e.event_type, EventType::Modified);
        assert_eq!(e.object.session_id(), id);
    }
}

/// "Fleet API", watch: reconnect with the last processed cursor; a cursor
/// the server no longer covers is 410, typed, for list and watch alike.
#[tokio::test]
async fn an_expired_cursor_is_410_for_list_and_watch() {
    let env = env(EmulatorConfig::default()).await;
    env.session(None);
    let (_, old) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    env.emu.expire_cursors();
    let items: Vec<_> = env
        .client
        .watch(&env.outpost, old.as_deref())
        .collect()
        .await;
    assert!(
        matches!(&items[..], [Err(FleetError::CursorExpired { .. })]),
        "{items:?}"
    );
    let err = env
        .client
        .list_page(&ListQuery::new(&env.outpost).cursor(old.unwrap()))
        .await
        .unwrap_err();
    assert!(matches!(err, FleetError::CursorExpired { .. }), "{err:?}");
    // Listing again gives a cursor that works.
    let (_, fresh) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    let mut watch = env.client.watch_forever(&env.outpost, fresh);
    let id = env.session(None);
    loop {
        if let WatchItem::Event(e) = next(&mut watch).await {
            assert_eq!(e.object.session_id(), id);
            break;
        }
    }
}

/// "Fleet API", watch (observed): idle streams send `: keepalive` comments.
#[tokio::test]
async fn idle_watches_send_keepalive_comments() {
    let env = env(EmulatorConfig {
        keepalive: Duration::from_millis(20),
        ..EmulatorConfig::default()
    })
    .await;
    let url = format!(
        "{}/opbeta/outposts/devins?outpost={}&watch=true",
        env.emu.base_url(),
        env.outpost
    );
    let mut resp = reqwest::Client::new()
        .get(url)
        .bearer_auth(env.emu.account_token())
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    while !text.contains(": keepalive") {
        let chunk = tokio::time::timeout(HANG, resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// "Fleet API", claim and release; "Claims and identity": 409 is normal,
/// the same acceptor renews with a fresh token, release is 409 unless held
/// and 404 once the entry is gone.
#[tokio::test]
async fn claim_conflict_renew_release_and_gone() {
    let env = env(EmulatorConfig::default()).await;
    let id = env.session(None);
    let claimed = env.client.claim(&sid(&id), "w1").await.unwrap();
    let token1 = claimed.status.connect_token.clone().unwrap();
    assert!(claimed.status.gateway_url.is_some());
    assert!(claimed.status.claim_deadline.is_some());
    assert!(matches!(
        env.client.claim(&sid(&id), "w2").await,
        Err(ClaimError::Conflict)
    ));
    let renewed = env.client.claim(&sid(&id), "w1").await.unwrap();
    assert_ne!(
        renewed.status.connect_token.unwrap().expose(),
        token1.expose()
    );
    assert_eq!(
        env.client.release(&sid(&id), "w2").await.unwrap(),
        ReleaseOutcome::NotHolder
    );
    assert_eq!(
        env.client.release(&sid(&id), "w1").await.unwrap(),
        ReleaseOutcome::Released
    );
    env.emu.remove_entry(&id);
    assert_eq!(
        env.client.release(&sid(&id), "w1").await.unwrap(),
        ReleaseOutcome::Gone
    );
    assert!(env.client.get(&sid(&id)).await.unwrap().is_none());
}

/// "Fleet API", outposts: `{metadata: {outpost_id, account_id,
/// created_at}, spec: {name, platform (may be null), description},
/// status}`; the name is `spec.name`; null platform means linux.
#[tokio::test]
async fn outposts_carry_spec_name_and_a_null_platform_means_linux() {
    let env = env(EmulatorConfig {
        faults: Faults {
            null_platform: true,
            ..Faults::default()
        },
        ..EmulatorConfig::default()
    })
    .await;
    let raw: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/opbeta/outposts/{}",
            env.emu.base_url(),
            env.outpost
        ))
        .bearer_auth(env.emu.account_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw["spec"]["name"], "lab");
    assert!(raw["spec"]["platform"].is_null());
    assert!(raw["metadata"]["account_id"].is_string());
    assert!(raw["metadata"].get("name").is_none());
    let listed: Vec<Outpost> = env.client.list_outposts().await.unwrap();
    assert_eq!(listed[0].name(), "lab");
    assert_eq!(listed[0].spec.platform, Platform::Linux);
    // Queue entries too.
    env.session(None);
    let (entries, _) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    assert_eq!(entries[0].spec.platform, Platform::Linux);
}

/// "Fleet API", `status.claim_deadline`: seconds, milliseconds and ISO-8601
/// are the same instant to the client.
#[tokio::test]
async fn claim_deadlines_in_every_spelling_parse() {
    let mut deadlines = Vec::new();
    for format in [
        TimestampFormat::Seconds,
        TimestampFormat::Millis,
        TimestampFormat::Iso8601,
    ] {
        let env = env(EmulatorConfig {
            deadline_format: format,
            ..EmulatorConfig::default()
        })
        .await;
        let id = env.session(None);
        let before = chrono::Utc::now();
        let e = env.client.claim(&sid(&id), "w1").await.unwrap();
        let deadline = e.status.claim_deadline.expect("deadline parsed").0;
        // About five minutes out, whatever the spelling.
        let lifetime = deadline - before;
        assert!(
            lifetime > chrono::Duration::seconds(200) && lifetime <= chrono::Duration::seconds(301),
            "{format:?}: {lifetime}"
        );
        deadlines.push(format);
    }
    assert_eq!(deadlines.len(), 3);
}

/// "Queue quirks seen in the wild": unknown fields and enum values are
/// kept, never a failure. The emulator only sends known values, so this
/// reads a row as the service might send it after adding some.
#[tokio::test]
async fn unknown_fields_and_enum_values_are_tolerated() {
    let env = env(EmulatorConfig::default()).await;
    let id = env.session(None);
    let mut raw: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/opbeta/outposts/devins/{id}",
            env.emu.base_url()
        ))
        .bearer_auth(env.emu.account_token())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    raw["status"]["session_status"] = "hibernating".into();
    raw["spec"]["kind"] = "fork".into();
    raw["spec"]["future"] = serde_json::json!({"x": 1});
    let entry: QueueEntry = serde_json::from_value(raw).unwrap();
    assert_eq!(
        entry.status.session_status,
        SessionStatus::Unknown("hibernating".into())
    );
    let seen: BTreeSet<&str> = [entry.session_id()].into();
    assert!(seen.contains(id.as_str()));
}
