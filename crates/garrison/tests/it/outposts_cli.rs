//! `garrison outposts list|create|delete` as a program, against the
//! in-process emulator.

use crate::cli::Home;
use crate::common;
use emulator::NewSession;

#[tokio::test]
async fn create_list_with_queue_depth_and_delete() {
    let emu = common::emulator().await;
    let home = Home::new();
    let base = emu.base_url();
    let token = emu.account_token();
    let env = [("DEVIN_OUTPOSTS_TOKEN", token.as_str())];
    let api = ["--api-url", base.as_str()];

    let created = home
        .run(
            &[
                &["outposts", "create", "lab-a", "--description", "GPU lab"][..],
                &api,
                &["--json"],
            ]
            .concat(),
            &env,
            None,
        )
        .await
        .ok();
    let outpost: fleet::Outpost = serde_json::from_str(&created.stdout).unwrap();
    let id = outpost.metadata.outpost_id;
    assert_eq!(outpost.spec.name, "lab-a");
    assert_eq!(outpost.spec.description.as_deref(), Some("GPU lab"));

    emu.create_session(NewSession {
        outpost_id: id.clone(),
        ..Default::default()
    })
    .unwrap();

    // DEVIN_API_URL works like the flag.
    let env_with_url = [env[0], ("DEVIN_API_URL", base.as_str())];
    let listed = home
        .run(&["outposts", "list"], &env_with_url, None)
        .await
        .ok();
    let mut lines = listed.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["ID", "NAME", "PLATFORM", "QUEUE", "CLAIMS"]);
    let row: Vec<&str> = lines
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{id} not listed:\n{}", listed.stdout))
        .split_whitespace()
        .collect();
    assert_eq!(row, [id.as_str(), "lab-a", "linux", "1", "0"]);
    assert!(!listed.all().contains(&token));

    let json = home
        .run(
            &[&["outposts", "list", "--json"][..], &api].concat(),
            &env,
            None,
        )
        .await
        .ok();
    let all: Vec<fleet::Outpost> = serde_json::from_str(&json.stdout).unwrap();
    let mine = all.iter().find(|o| o.metadata.outpost_id == id).unwrap();
    assert_eq!(mine.status.queue_depth, 1);
    assert_eq!(mine.status.active_claims, 0);

    let deleted = home
        .run(
            &[&["outposts", "delete", &id][..], &api].concat(),
            &env,
            None,
        )
        .await
        .ok();
    assert!(deleted.stdout.contains(&id), "{deleted:#?}");
    let after = home
        .run(&[&["outposts", "list"][..], &api].concat(), &env, None)
        .await
        .ok();
    assert!(!after.stdout.contains(&id), "{after:#?}");

    let again = home
        .run(
            &[&["outposts", "delete", &id][..], &api].concat(),
            &env,
            None,
        )
        .await
        .failed();
    assert!(again.stderr.contains("no such outpost"), "{again:#?}");
}

#[tokio::test]
async fn create_and_delete_name_the_orchestrator_scope_on_403() {
    let emu = common::emulator().await;
    let home = Home::new();
    let base = emu.base_url();
    let machine_only = emu.mint_token(&[emulator::SCOPE_MACHINE]);
    let env = [("DEVIN_OUTPOSTS_TOKEN", machine_only.as_str())];
    let existing = emu.create_outpost("keep-me", fleet::Platform::Linux);

    let created = home
        .run(
            &["outposts", "create", "nope", "--api-url", &base],
            &env,
            None,
        )
        .await
        .failed();
    assert!(
        created.stderr.contains("account.outposts.orchestrator"),
        "{created:#?}"
    );
    let deleted = home
        .run(
            &["outposts", "delete", &existing, "--api-url", &base],
            &env,
            None,
        )
        .await
        .failed();
    assert!(
        deleted.stderr.contains("account.outposts.orchestrator"),
        "{deleted:#?}"
    );
    // Listing needs only the machine scope.
    let listed = home
        .run(&["outposts", "list", "--api-url", &base], &env, None)
        .await
        .ok();
    assert!(listed.stdout.contains(&existing));
}

#[tokio::test]
async fn without_a_token_it_says_how_to_get_one() {
    let home = Home::new();
    let ran = home
        .run(
            &["outposts", "list", "--api-url", "http://127.0.0.1:9"],
            &[],
            None,
        )
        .await
        .failed();
    assert!(ran.stderr.contains("garrison connect"), "{ran:#?}");
}
