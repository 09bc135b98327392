//! Building the session image on (mock) Modal and starting sandboxes from
//! it by name.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use modal::image::{self, ImageCache};
use modal::{Client, ModalBackend};
use sandbox::Recipe;
use sandbox::{Resources, Sandbox, SandboxName, SandboxSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_is_built_once_and_sandboxes_start_from_it_by_name() {
    let setup = common::start(|_| {}).await;
    let state = tempfile::tempdir().unwrap();
    let cache = ImageCache::path(state.path());
    let client = Client::new(&setup.settings.client).unwrap();
    let mut recipe = Recipe::default_recipe();
    recipe.packages.push("python3".into());
    recipe.steps.push("useradd -m dev".into());

    let mut logs = Vec::new();
    let built = image::build(&client, "session", &recipe, &cache, |l| {
        logs.push(l.to_owned())
    })
    .await
    .unwrap();
    assert!(!built.reused);
    let view = setup.mock.image(&built.image_id).unwrap();
    assert_eq!(
        view.dockerfile_commands,
        image::dockerfile_commands(&recipe).unwrap()
    );
    assert_eq!(view.builder_version, modal::wire::IMAGE_BUILDER_VERSION);
    assert!(
        logs.iter().any(|l| l.contains("useradd -m dev")),
        "{logs:?}"
    );
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // The same recipe under another name: no second build.
    let again = image::build(&client, "other", &recipe, &cache, |_| {})
        .await
        .unwrap();
    assert!(again.reused);
    assert_eq!(again.image_id, built.image_id);
    assert_eq!(setup.mock.calls("ImageGetOrCreate"), 1);

    let mut settings = setup.settings.clone();
    settings.image = Some("session".into());
    settings.image_cache = Some(cache.clone());
    let backend = ModalBackend::new(settings.clone()).unwrap();
    let spec = SandboxSpec {
        name: SandboxName::for_session("image-by-name"),
        labels: sandbox::session_labels("image-by-name", common::OUTPOST),
        image: None,
        restore_from: None,
        resources: Resources::default(),
        network: Default::default(),
    };
    let handle = backend.create(&spec).await.unwrap();
    let def = setup.mock.sandbox(&handle.id).unwrap().definition;
    assert_eq!(def.image_id, built.image_id);
    backend.destroy(&handle).await.unwrap();

    // A name never built is a clear, fatal error.
    settings.image = Some("never-built".into());
    let backend = ModalBackend::new(settings).unwrap();
    let err = backend.create(&spec).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("garrison image build never-built --backend modal"),
        "{err}"
    );
}
