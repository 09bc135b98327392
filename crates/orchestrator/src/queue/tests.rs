//! The queue view: what a list changes, which session is woken, where the
//! watch resumes, and an expired cursor against the emulator.

use super::*;
use emulator::{Emulator, EmulatorConfig, NewSession};
use fleet::{ClientOptions, Platform, Secret};

async fn until(view: &QueueView, done: impl Fn(&QueueView) -> bool) {
    let mut changes = view.subscribe();
    while !done(view) {
        changes.changed().await.unwrap();
    }
}

/// Protocol page, watch row: after 410 (cursor expired) list first,
/// then watch from the list's cursor; the stored cursor is the one of
/// the last entry applied.
#[tokio::test]
async fn an_expired_cursor_makes_the_queue_list_again_then_watch() {
    let emu = Emulator::start(EmulatorConfig::default()).await.unwrap();
    let outpost = emu.create_outpost("lab", Platform::Linux);
    let client = FleetClient::new(
        &emu.base_url(),
        Secret::new(emu.account_token()),
        ClientOptions {
            watch_backoff: fleet::Backoff::new(Duration::from_millis(1), Duration::from_millis(10)),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let view = QueueView::new(&outpost);
    let store = Arc::new(Store::in_memory().unwrap());
    let stop = CancellationToken::new();
    let task = tokio::spawn(run(
        client,
        view.clone(),
        store.clone(),
        Duration::from_secs(3600),
        QueueMode::Watch,
        stop.clone(),
    ));
    until(&view, QueueView::is_synced).await;
    let new = |id: &str| NewSession {
        outpost_id: outpost.clone(),
        session_id: Some(id.to_owned()),
        ..NewSession::default()
    };
    emu.create_session(new("devin-1")).unwrap();
    until(&view, |v| {
        v.get(&fleet::SessionId::new("devin-1").unwrap()).is_some()
    })
    .await;

    emu.expire_cursors();
    emu.create_session(new("devin-2")).unwrap();
    until(&view, |v| {
        v.get(&fleet::SessionId::new("devin-2").unwrap()).is_some()
    })
    .await;
    assert_eq!(
        view.relists.load(Ordering::Relaxed),
        2,
        "the 410 was followed by a list, not a watch from the beginning"
    );
    stop.cancel();
    task.await.unwrap();
    let stored = store.cursor(&outpost).unwrap();
    assert!(stored.is_some());
}

fn entry(id: &str, status: &str) -> QueueEntry {
    serde_json::from_value(serde_json::json!({
        "metadata": {"session_id": id},
        "status": {"phase": "pending", "session_status": status}
    }))
    .unwrap()
}

fn map(entries: &[QueueEntry]) -> BTreeMap<fleet::SessionId, QueueEntry> {
    entries
        .iter()
        .map(|e| (e.id().clone(), e.clone()))
        .collect()
}

#[test]
fn a_list_names_only_the_entries_that_changed() {
    let before = map(&[
        entry("a", "running"),
        entry("b", "running"),
        entry("c", "running"),
    ]);
    let after = map(&[
        entry("a", "running"),
        entry("b", "suspended"),
        entry("d", "running"),
    ]);
    let mut changed = changed_ids(&before, &after);
    changed.sort();
    assert_eq!(changed, ["b", "c", "d"]);
    assert!(changed_ids(&after, &after).is_empty());
}

#[test]
fn a_session_wakes_for_its_own_entry_only() {
    let view = QueueView::new("o");
    let a = fleet::SessionId::new("a").unwrap();
    let mut mine = view.subscribe_session(&a);
    let mut all = view.subscribe();
    view.upsert(entry("b", "running"));
    assert!(!mine.has_changed().unwrap());
    assert!(all.has_changed().unwrap());
    all.mark_unchanged();
    view.upsert(entry("a", "running"));
    assert!(mine.has_changed().unwrap());
    mine.mark_unchanged();
    all.mark_unchanged();
    // The watch's echo of what a claim answer already said.
    view.upsert(entry("a", "running"));
    assert!(!mine.has_changed().unwrap());
    assert!(!all.has_changed().unwrap());
    view.remove(&a);
    assert!(mine.has_changed().unwrap());
}

#[test]
fn the_watch_starts_from_the_list_cursor_else_the_stored_one() {
    assert_eq!(
        watch_start(Some("list".into()), Some("stored".into())).as_deref(),
        Some("list")
    );
    assert_eq!(
        watch_start(None, Some("stored".into())).as_deref(),
        Some("stored")
    );
    assert_eq!(watch_start(None, None), None);
}
