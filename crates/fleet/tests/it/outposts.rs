//! Outpost CRUD and its paging.

use emulator::EmulatorConfig;
use fleet::{CreateOutpost, FleetError, Platform};

use crate::common::{env, sid};

#[tokio::test]
async fn create_get_list_delete() {
    let env = env(EmulatorConfig::default()).await;
    let created = env
        .client
        .create_outpost(&CreateOutpost {
            name: "mac-lab".into(),
            platform: Platform::Macos,
            description: Some("the mac minis".into()),
        })
        .await
        .unwrap();
    let id = created.metadata.outpost_id.clone();
    assert!(!id.is_empty());
    assert_eq!(created.spec.name, "mac-lab");
    assert_eq!(created.spec.platform, Platform::Macos);

    let got = env.client.get_outpost(&id).await.unwrap().unwrap();
    assert_eq!(got.spec.name, "mac-lab");

    // Enough outposts for more than one page of 100.
    for i in 0..120 {
        env.emu
            .create_outpost(&format!("bulk-{i}"), Platform::Linux);
    }
    let all = env.client.list_outposts().await.unwrap();
    assert_eq!(all.len(), 122);
    let mut ids: Vec<_> = all.iter().map(|o| o.metadata.outpost_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 122);

    env.client.delete_outpost(&id).await.unwrap();
    assert_eq!(env.client.get_outpost(&id).await.unwrap(), None);
    assert!(matches!(
        env.client.delete_outpost(&id).await,
        Err(FleetError::NotFound { .. })
    ));
}

#[tokio::test]
async fn queue_depth_and_active_claims_are_reported() {
    let env = env(EmulatorConfig::default()).await;
    let a = env.session(None);
    env.session(None);
    env.client.claim(&sid(&a), "acc").await.unwrap();
    let o = env.client.get_outpost(&env.outpost).await.unwrap().unwrap();
    assert_eq!(o.status.active_claims, 1);
    assert!(o.status.queue_depth >= 1);
}
