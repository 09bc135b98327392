//! Session images built on Tensorlake against the mock: the builder
//! sandbox, the catalog, and sessions started from a catalog image.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::{KEY, World};
use sandbox::Recipe;
use sandbox::{Resources, Sandbox, SandboxName, SandboxSpec};
use tensorlake::{
    BuildRequest, Client, DEFAULT_STEP_PATH, ImageCatalog, Secret, TensorlakeBackend, build_image,
};

fn client(world: &World) -> Client {
    Client::with_retry(world.mock.url(), Secret::new(KEY), world.config().retry).unwrap()
}

/// A `PATH` whose `apt-get` only says what it was asked: the mock runs
/// steps on this machine, which must not install anything.
fn fake_apt_path(world: &World) -> String {
    let bin = world.dir.path().join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let apt = bin.join("apt-get");
    std::fs::write(&apt, "#!/bin/sh\necho \"fake apt-get $*\"\n").unwrap();
    std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{DEFAULT_STEP_PATH}", bin.display())
}

fn request(world: &World, name: &str, recipe: &str) -> BuildRequest {
    BuildRequest {
        name: name.to_owned(),
        recipe: Recipe::parse(recipe).unwrap(),
        base_image: None,
        step_path: fake_apt_path(world),
        resources: Resources::default(),
    }
}

async fn session(backend: &TensorlakeBackend, id: &str, image: Option<&str>) -> sandbox::Handle {
    backend
        .create(&SandboxSpec {
            name: SandboxName::for_session(id),
            labels: Default::default(),
            image: image.map(str::to_owned),
            restore_from: None,
            resources: Resources::default(),
            network: Default::default(),
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_recipe_is_built_in_a_builder_sandbox_snapshotted_and_registered() {
    let world = World::start().await;
    let backend = world.backend();
    let catalog = ImageCatalog::new(&client(&world));
    let mut lines = Vec::new();
    let image = build_image(
        &backend,
        &catalog,
        &request(
            &world,
            "garrison-session",
            "packages = [\"jq\"]\nsteps = [\"echo built > marker\", \"echo step two ran\"]",
        ),
        &mut |line: &str| lines.push(line.to_owned()),
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(image.name, "garrison-session");
    assert!(image.id.starts_with("image_"), "{image:?}");
    let text = lines.join("\n");
    for expected in [
        "step 1/3: packages",
        "fake apt-get update",
        "install -y --no-install-recommends ca-certificates git jq",
        "step 3/3: steps[1]",
        "  | step two ran",
        "registering snapshot",
        "deleting the builder sandbox",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    assert!(
        client(&world).list_sandboxes().await.unwrap().is_empty(),
        "the builder sandbox is deleted"
    );
    assert_eq!(
        catalog.find("garrison-session").await.unwrap().as_ref(),
        Some(&image)
    );

    // A session of a backend whose image setting (TENSORLAKE_IMAGE) names
    // the catalog image has the build's files, and none of the builder's
    // own traces.
    let mut config = world.config();
    config.default_image = Some("garrison-session".to_owned());
    let sessions = TensorlakeBackend::new(config).unwrap();
    let handle = session(&sessions, "from-image", None).await;
    assert_eq!(handle.image.as_deref(), Some("garrison-session"));
    let workdir = std::path::Path::new(&handle.workdir);
    assert_eq!(
        std::fs::read_to_string(workdir.join("marker")).unwrap(),
        "built\n"
    );
    let root = workdir.parent().unwrap();
    assert!(!root.join(tensorlake::OUTPUT_LOG).exists());
    // A session from another image does not.
    let plain = session(&backend, "plain", None).await;
    assert!(!std::path::Path::new(&plain.workdir).join("marker").exists());
}

#[tokio::test]
async fn a_failing_step_names_the_step_and_its_output_and_the_builder_is_deleted() {
    let world = World::start().await;
    let backend = world.backend();
    let catalog = ImageCatalog::new(&client(&world));
    let error = build_image(
        &backend,
        &catalog,
        &request(
            &world,
            "broken",
            "steps = [\"true\", \"echo about to fail; echo no such thing >&2; exit 3\", \"echo never\"]",
        ),
        &mut |_: &str| {},
        std::future::pending(),
    )
    .await
    .unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.contains("build step steps[1] exited with status 3"),
        "{message}"
    );
    assert!(message.contains("| no such thing"), "{message}");
    assert!(!message.contains("never"), "{message}");
    assert!(client(&world).list_sandboxes().await.unwrap().is_empty());
    assert!(catalog.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_bad_name_is_refused_before_any_sandbox_exists() {
    let world = World::start().await;
    let backend = world.backend();
    let catalog = ImageCatalog::new(&client(&world));
    let error = build_image(
        &backend,
        &catalog,
        &request(&world, "Not_Lowercase", ""),
        &mut |_: &str| {},
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("lowercase"), "{error}");
    assert_eq!(world.mock.requests("/sandboxes"), 0);
}

#[tokio::test]
async fn the_catalog_lists_across_pages_finds_replaces_and_deletes() {
    let world = World::start().await;
    let backend = world.backend();
    let client = client(&world);
    let catalog = ImageCatalog::new(&client);
    let handle = session(&backend, "source", None).await;
    let snapshot = backend.snapshot(&handle).await.unwrap();
    let mut first = None;
    for i in 0..105 {
        let image = catalog
            .register(&format!("team/img-{i:03}:v1"), &snapshot.id)
            .await
            .unwrap();
        first.get_or_insert(image);
    }
    let all = catalog.list().await.unwrap();
    assert_eq!(all.len(), 105, "the cursor is followed past one page");
    assert!(world.mock.requests("/images/v4/images") >= 105 + 2);

    // Registering again under a name replaces the image, keeping its id.
    let second = backend.snapshot(&handle).await.unwrap();
    let again = catalog
        .register("team/img-000:v1", &second.id)
        .await
        .unwrap();
    let first = first.unwrap();
    assert_eq!(again.id, first.id);
    assert_eq!(again.snapshot_id, second.id);
    assert_eq!(
        catalog.find("team/img-000:v1").await.unwrap().unwrap(),
        again
    );

    assert!(catalog.delete("team/img-000:v1").await.unwrap());
    assert!(!catalog.delete("team/img-000:v1").await.unwrap());
    assert_eq!(catalog.find("team/img-000:v1").await.unwrap(), None);
    assert_eq!(catalog.list().await.unwrap().len(), 104);
    // An unknown snapshot is refused.
    let error = catalog.register("nothing", "0123abcd").await.unwrap_err();
    assert_eq!(error.status(), Some(404), "{error}");
}

#[tokio::test]
async fn an_image_outlives_the_snapshot_it_was_registered_from() {
    let world = World::start().await;
    let backend = world.backend();
    let catalog = ImageCatalog::new(&client(&world));
    let handle = session(&backend, "source", None).await;
    std::fs::write(std::path::Path::new(&handle.workdir).join("kept"), "yes").unwrap();
    let snapshot = backend.snapshot(&handle).await.unwrap();
    catalog.register("kept", &snapshot.id).await.unwrap();
    backend.delete_snapshot(&snapshot).await.unwrap();
    let from = session(&backend, "from-kept", Some("kept")).await;
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(&from.workdir).join("kept")).unwrap(),
        "yes"
    );
}

#[test]
fn the_image_setting_takes_a_catalog_image_name() {
    let source = ::common::settings::MapSource {
        vars: [
            ("TENSORLAKE_API_KEY", "k"),
            ("TENSORLAKE_IMAGE", "team/garrison-session:v2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        ..Default::default()
    };
    let settings = tensorlake::resolve_settings(&source).unwrap();
    assert_eq!(settings.image.as_deref(), Some("team/garrison-session:v2"));
}

#[tokio::test]
async fn a_pending_registration_is_sent_again_until_published() {
    let world = World::start().await;
    let backend = world.backend();
    let catalog = ImageCatalog::new(&client(&world));
    let handle = session(&backend, "source", None).await;
    let snapshot = backend.snapshot(&handle).await.unwrap();
    // More pending answers than one request's retries absorb.
    world.mock.inject(tensorlake_mock::Fault {
        method: Some("POST".into()),
        path_prefix: "/images/v4/images/from-snapshot".into(),
        status: 503,
        code: Some("publication_pending".into()),
        times: 5,
        retry_after_secs: None,
    });
    let image = catalog.register("pending", &snapshot.id).await.unwrap();
    assert_eq!(image.name, "pending");
    assert_eq!(
        world.mock.requests("/images/v4/images/from-snapshot"),
        6,
        "five pending answers, then the publication"
    );
    // Any other refusal is an error at once.
    world.mock.inject(tensorlake_mock::Fault {
        method: Some("POST".into()),
        path_prefix: "/images/v4/images/from-snapshot".into(),
        status: 409,
        code: Some("image_build_in_progress".into()),
        times: 1,
        retry_after_secs: None,
    });
    let error = catalog.register("pending", &snapshot.id).await.unwrap_err();
    assert_eq!(error.status(), Some(409), "{error}");
}

#[tokio::test]
async fn the_mock_answers_a_replayed_idempotency_key_with_the_first_result() {
    let world = World::start().await;
    let backend = world.backend();
    let handle = session(&backend, "source", None).await;
    let snapshot = backend.snapshot(&handle).await.unwrap();
    let post = |key: Option<&str>, name: &str| {
        let mut request = reqwest::Client::new()
            .post(format!(
                "{}/images/v4/images/from-snapshot",
                world.mock.url()
            ))
            .bearer_auth(KEY)
            .json(&serde_json::json!({"name": name, "snapshot_id": snapshot.id, "public": false}));
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send()
    };
    let first = post(Some("k1"), "app").await.unwrap();
    assert_eq!(first.status(), 201);
    let first: serde_json::Value = first.json().await.unwrap();
    let again = post(Some("k1"), "app").await.unwrap();
    assert_eq!(again.status(), 201);
    assert_eq!(again.json::<serde_json::Value>().await.unwrap(), first);
    assert_eq!(post(Some("k1"), "other").await.unwrap().status(), 422);
    assert_eq!(post(None, "app").await.unwrap().status(), 400);
    assert_eq!(post(Some("k2"), "Not Valid").await.unwrap().status(), 400);
}

#[tokio::test]
async fn an_interrupted_build_deletes_its_builder_and_registers_nothing() {
    let world = World::start().await;
    let backend = world.backend();
    let catalog = ImageCatalog::new(&client(&world));
    let step_started = tokio::sync::Notify::new();
    let error = build_image(
        &backend,
        &catalog,
        &request(
            &world,
            "interrupted",
            "steps = [\"echo waiting; sleep 600\"]",
        ),
        &mut |line: &str| {
            if line.contains("| waiting") {
                step_started.notify_one();
            }
        },
        step_started.notified(),
    )
    .await
    .unwrap_err();
    assert_eq!(error.to_string(), "interrupted");
    assert!(client(&world).list_sandboxes().await.unwrap().is_empty());
    assert!(catalog.list().await.unwrap().is_empty());
}
