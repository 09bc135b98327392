//! Authentication and scopes, token hygiene, and GET retries through
//! injected server errors.

use emulator::{EmulatorConfig, Faults, SCOPE_MACHINE};
use fleet::{ClaimError, CreateOutpost, FleetError, ListQuery, Platform};
use futures::StreamExt;

use crate::common::{client, env, sid};

fn assert_no_token(token: &str, what: &str, err: &dyn std::fmt::Debug, display: String) {
    let debug = format!("{err:?}");
    assert!(!debug.contains(token), "{what}: token in Debug: {debug}");
    assert!(
        !display.contains(token),
        "{what}: token in Display: {display}"
    );
}

#[tokio::test]
async fn a_bad_token_is_unauthorized_everywhere_and_never_printed() {
    let env = env(EmulatorConfig::default()).await;
    let id = env.session(None);
    let token = "cog_not_a_real_token_0123456789";
    let bad = client(&env.emu, token);

    let e = bad
        .list_page(&ListQuery::new(&env.outpost))
        .await
        .unwrap_err();
    assert!(matches!(e, FleetError::Unauthorized { .. }), "{e:?}");
    assert_no_token(token, "list", &e, e.to_string());
    let e = bad.get(&sid(&id)).await.unwrap_err();
    assert!(matches!(e, FleetError::Unauthorized { .. }), "{e:?}");
    assert_no_token(token, "get", &e, e.to_string());
    let e = bad.claim(&sid(&id), "acc").await.unwrap_err();
    assert!(
        matches!(e, ClaimError::Fleet(FleetError::Unauthorized { .. })),
        "{e:?}"
    );
    assert_no_token(token, "claim", &e, e.to_string());
    let e = bad.release(&sid(&id), "acc").await.unwrap_err();
    assert!(matches!(e, FleetError::Unauthorized { .. }), "{e:?}");
    let e = bad.list_outposts().await.unwrap_err();
    assert!(matches!(e, FleetError::Unauthorized { .. }), "{e:?}");
    let items: Vec<_> = bad.watch(&env.outpost, None).collect().await;
    match &items[..] {
        [Err(e @ FleetError::Unauthorized { .. })] => {
            assert_no_token(token, "watch", e, e.to_string())
        }
        other => panic!("{other:?}"),
    }
    // 401 is not transient: no retries.
    assert_eq!(bad.stats().routes[fleet::stats::route::GET].requests, 1);
    assert!(!format!("{bad:?}").contains(token));
}

#[tokio::test]
async fn a_missing_scope_is_forbidden_with_a_hint() {
    let env = env(EmulatorConfig::default()).await;
    let machine_token = env.emu.mint_token(&[SCOPE_MACHINE]);
    let machine = client(&env.emu, &machine_token);
    // Reading the queue is fine with the machine scope, one outpost's or
    // (no `outpost` filter) the whole account's...
    machine
        .list_page(&ListQuery::new(&env.outpost))
        .await
        .unwrap();
    machine.list_page(&ListQuery::account()).await.unwrap();
    // ...reading an outpost itself needs the orchestrator scope...
    let e = machine.get_outpost(&env.outpost).await.unwrap_err();
    assert!(
        matches!(
            e,
            FleetError::Forbidden {
                scope_hint: "account.outposts.orchestrator",
                ..
            }
        ),
        "{e:?}"
    );
    // ...and so do creating and deleting outposts.
    let e = machine
        .create_outpost(&CreateOutpost {
            name: "new".into(),
            platform: Platform::Linux,
            description: None,
        })
        .await
        .unwrap_err();
    match &e {
        FleetError::Forbidden { scope_hint, .. } => {
            assert_eq!(*scope_hint, "account.outposts.orchestrator")
        }
        other => panic!("{other:?}"),
    }
    assert_no_token(&machine_token, "create", &e, e.to_string());
    let e = machine.delete_outpost(&env.outpost).await.unwrap_err();
    assert!(matches!(e, FleetError::Forbidden { .. }), "{e:?}");

    let none_token = env.emu.mint_token(&[]);
    let none = client(&env.emu, &none_token);
    let e = none
        .list_page(&ListQuery::new(&env.outpost))
        .await
        .unwrap_err();
    match &e {
        FleetError::Forbidden { scope_hint, .. } => {
            assert_eq!(*scope_hint, "account.outposts.machine");
            assert!(e.to_string().contains("account.outposts.machine"));
        }
        other => panic!("{other:?}"),
    }
    assert_no_token(&none_token, "list", &e, e.to_string());
    let e = none.claim(&sid("devin-x"), "acc").await.unwrap_err();
    assert!(
        matches!(e, ClaimError::Fleet(FleetError::Forbidden { .. })),
        "{e:?}"
    );
}

#[tokio::test]
async fn gets_ride_through_injected_server_errors() {
    let env = env(EmulatorConfig::default()).await;
    let ids: Vec<String> = (0..5).map(|_| env.session(None)).collect();
    env.emu.set_faults(Faults {
        error_rate: 0.1,
        ..Faults::default()
    });
    for _ in 0..20 {
        for id in &ids {
            assert!(env.client.get(&sid(id)).await.unwrap().is_some());
        }
        let (all, _) = env
            .client
            .list_all_from(ListQuery::new(&env.outpost).first(2))
            .await
            .unwrap();
        assert_eq!(all.len(), 5);
    }
    assert_eq!(env.client.list_outposts().await.unwrap().len(), 1);
    let stats = env.client.stats();
    let retries: u64 = stats.routes.values().map(|r| r.retries).sum();
    let errors: u64 = stats
        .routes
        .values()
        .flat_map(|r| r.responses.iter())
        .filter(|(code, _)| **code >= 500)
        .map(|(_, n)| n)
        .sum();
    // 200+ requests at 10%: some were refused and retried (p(no fault) < 1e-9).
    assert!(retries > 0 && errors > 0, "{stats:?}");
    assert_eq!(retries, errors);
}
