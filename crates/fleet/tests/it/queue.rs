//! `GET /devins` (paging, filters) and `GET /devins/{id}`.

use emulator::EmulatorConfig;
use fleet::{ListQuery, Phase, ReleaseOutcome};

use crate::common::{env, sid};

#[tokio::test]
async fn paging_repeats_the_boundary_item_and_list_all_dedups() {
    let env = env(EmulatorConfig::default()).await;
    let ids: Vec<String> = (0..7).map(|_| env.session(None)).collect();

    // By hand: the second page starts with the first page's last item.
    let first = env
        .client
        .list_page(&ListQuery::new(&env.outpost).first(3))
        .await
        .unwrap();
    assert!(first.has_next_page);
    assert_eq!(first.total, Some(7));
    assert_eq!(first.items.len(), 3);
    let second = env
        .client
        .list_page(
            &ListQuery::new(&env.outpost)
                .first(3)
                .cursor(first.cursor.clone().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(
        second.items[0].session_id(),
        first.items[2].session_id(),
        "at-least-once: the boundary item repeats"
    );

    // list_all upserts, keeping first-seen order, and returns a cursor.
    let (entries, cursor) = env
        .client
        .list_all_from(ListQuery::new(&env.outpost).first(3))
        .await
        .unwrap();
    let got: Vec<&str> = entries.iter().map(|e| e.session_id()).collect();
    assert_eq!(got, ids.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(cursor.is_some());

    // The default page size (200) takes one page.
    let (all, _) = env.client.list_all(&env.outpost, None, None).await.unwrap();
    assert_eq!(all.len(), 7);
    let lists = env.client.stats().routes[fleet::stats::route::LIST].requests;
    // 2 by hand, 4 for list_all_from (7 rows, 3 a page: the third page is
    // full, so a fourth holds only its repeated last row), 1 for list_all.
    assert_eq!(lists, 7);
}

#[tokio::test]
async fn page_size_one_still_advances() {
    let env = env(EmulatorConfig::default()).await;
    for _ in 0..4 {
        env.session(None);
    }
    let (entries, _) = env
        .client
        .list_all_from(ListQuery::new(&env.outpost).first(1))
        .await
        .unwrap();
    assert_eq!(entries.len(), 4);
}

#[tokio::test]
async fn filters_by_phase_and_acceptor() {
    let env = env(EmulatorConfig::default()).await;
    let a = env.session(None);
    let b = env.session(None);
    let c = env.session(None);
    env.client.claim(&sid(&a), "acc-1").await.unwrap();
    env.client.claim(&sid(&b), "acc-2").await.unwrap();

    let ids = |entries: Vec<fleet::QueueEntry>| {
        entries
            .into_iter()
            .map(|e| e.session_id().to_owned())
            .collect::<Vec<_>>()
    };
    let (c, a) = (vec![c], vec![a]);
    let (pending, _) = env
        .client
        .list_all(&env.outpost, Some(Phase::Pending), None)
        .await
        .unwrap();
    assert_eq!(ids(pending), c);
    let (mine, _) = env
        .client
        .list_all(&env.outpost, Some(Phase::Claimed), Some("acc-1"))
        .await
        .unwrap();
    assert_eq!(ids(mine), a);
    let (claimed, _) = env
        .client
        .list_all(&env.outpost, Some(Phase::Claimed), None)
        .await
        .unwrap();
    assert_eq!(ids(claimed), [a[0].clone(), b]);
}

#[tokio::test]
async fn get_returns_the_entry_or_none() {
    let env = env(EmulatorConfig::default()).await;
    let id = env.session(None);
    let entry = env.client.get(&sid(&id)).await.unwrap().unwrap();
    assert_eq!(entry.session_id(), id);
    assert_eq!(entry.metadata.outpost_id, env.outpost);
    assert_eq!(entry.status.phase, Phase::Pending);
    assert!(entry.metadata.created_at.is_some());
    assert_eq!(env.client.get(&sid("devin-nope")).await.unwrap(), None);
    env.emu.remove_entry(&id);
    assert_eq!(env.client.get(&sid(&id)).await.unwrap(), None);
}

#[tokio::test]
async fn awkward_ids_reach_the_right_route() {
    let env = env(EmulatorConfig::default()).await;
    for raw in ["a/b?c", "sp ace#x", "../up", "100%", "ünï"] {
        let id = env.session(Some(raw));
        assert_eq!(id, raw);
        let entry = env.client.get(&sid(&id)).await.unwrap().unwrap();
        assert_eq!(entry.session_id(), raw);
        let claimed = env.client.claim(&sid(&id), "acc").await.unwrap();
        assert_eq!(claimed.session_id(), raw);
        assert_eq!(
            env.client.release(&sid(&id), "acc").await.unwrap(),
            ReleaseOutcome::Released
        );
    }
}
