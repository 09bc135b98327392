//! `GET /devins?watch=true`: replay after a cursor, reconnects, withheld
//! events.

use std::collections::BTreeSet;
use std::time::Duration;

use emulator::{EmulatorConfig, Faults};
use fleet::{ClientOptions, EventType, FleetError, Secret, WatchItem};
use futures::StreamExt;

use crate::common::{HANG, env, next, options};

#[tokio::test]
async fn watch_replays_only_what_changed_after_the_list_cursor() {
    let env = env(EmulatorConfig::default()).await;
    let old: BTreeSet<String> = (0..3).map(|_| env.session(None)).collect();
    let (listed, cursor) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    assert_eq!(listed.len(), 3);
    let new: BTreeSet<String> = (0..2).map(|_| env.session(None)).collect();

    let mut watch = env.client.watch(&env.outpost, cursor.as_deref());
    let mut seen = BTreeSet::new();
    while seen != new {
        let event = tokio::time::timeout(HANG, watch.next())
            .await
            .unwrap()
            .expect("stream open")
            .expect("event");
        assert_eq!(event.event_type, EventType::Modified);
        let id = event.object.session_id().to_owned();
        assert!(
            !old.contains(&id),
            "replayed {id}, listed before the cursor"
        );
        assert!(event.cursor.is_some());
        seen.insert(id);
    }

    // Without a cursor the watch starts from the beginning.
    let mut from_start = env.client.watch(&env.outpost, None);
    let mut all = BTreeSet::new();
    while all.len() < 5 {
        let event = tokio::time::timeout(HANG, from_start.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        all.insert(event.object.session_id().to_owned());
    }
    assert_eq!(all, old.union(&new).cloned().collect());
}

#[tokio::test]
async fn deletions_arrive_as_deleted_events() {
    let env = env(EmulatorConfig::default()).await;
    let id = env.session(None);
    let (_, cursor) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    env.emu.remove_entry(&id);
    let mut watch = env.client.watch(&env.outpost, cursor.as_deref());
    let event = tokio::time::timeout(HANG, watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(event.event_type, EventType::Deleted);
    assert_eq!(event.object.session_id(), id);
}

#[tokio::test]
async fn watch_forever_reconnects_after_cuts_and_resumes_after_the_last_event() {
    let env = env(EmulatorConfig {
        faults: Faults {
            cut_watch_every_secs: Some(1),
            ..Faults::default()
        },
        keepalive: Duration::from_millis(100),
        ..EmulatorConfig::default()
    })
    .await;
    let (_, cursor) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    let mut watch = env.client.watch_forever(&env.outpost, cursor);
    let first = env.session(None);
    let mut events = Vec::new();
    let mut reconnects = 0;
    // Until the first session's event and at least one reconnect after it.
    while events.is_empty() || reconnects == 0 {
        match next(&mut watch).await {
            WatchItem::Event(e) => events.push(e.object.session_id().to_owned()),
            WatchItem::Reconnected { reconnects: n, .. } => reconnects = n,
            WatchItem::Disconnected { .. } => {}
        }
    }
    let second = env.session(None);
    while !events.contains(&second) {
        match next(&mut watch).await {
            WatchItem::Event(e) => events.push(e.object.session_id().to_owned()),
            WatchItem::Reconnected { reconnects: n, .. } => reconnects = n,
            WatchItem::Disconnected { .. } => {}
        }
    }
    // Reconnects resumed at the last event: at-least-once, so that event may
    // come again, but nothing is missed and the order holds.
    events.dedup();
    assert_eq!(events, [first, second]);
    assert!(reconnects >= 1);
}

#[tokio::test]
async fn a_watch_that_withholds_events_stays_open_and_a_relist_catches_up() {
    let env = env(EmulatorConfig {
        faults: Faults {
            withhold_events: true,
            ..Faults::default()
        },
        keepalive: Duration::from_millis(50),
        ..EmulatorConfig::default()
    })
    .await;
    let (_, cursor) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    // Idle limit 20x the keepalive: only keepalives keep the stream alive.
    let client = fleet::FleetClient::new(
        &env.emu.base_url(),
        Secret::new(env.emu.account_token()),
        ClientOptions {
            watch_idle_timeout: Duration::from_secs(1),
            ..options()
        },
    )
    .unwrap();
    let mut watch = client.watch(&env.outpost, cursor.as_deref());
    let id = env.session(None);
    // Three idle limits pass with neither an event, an idle timeout nor an end.
    let waited = tokio::time::timeout(Duration::from_secs(3), watch.next()).await;
    assert!(waited.is_err(), "expected silence, got {waited:?}");
    let (entries, _) = client.list_all(&env.outpost, None, None).await.unwrap();
    assert!(entries.iter().any(|e| e.session_id() == id));
}

#[tokio::test]
async fn an_unknown_outpost_is_an_empty_watch_and_a_bad_cursor_a_typed_error() {
    let env = env(EmulatorConfig {
        max_stream: Duration::from_millis(300),
        ..EmulatorConfig::default()
    })
    .await;
    // Devin's reference: `outpost` is a filter ("Applies to both list and
    // watch"), so an unknown one matches nothing rather than failing.
    let items: Vec<_> = env.client.watch("outpost_env-nope", None).collect().await;
    assert!(items.is_empty(), "{items:?}");
    // A cursor the server no longer covers is gone.
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
}
